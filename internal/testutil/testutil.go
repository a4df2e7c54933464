// Package testutil holds helpers shared by meshlet's tests: tier gates for
// privileged tests and small polling helpers. It is imported by tests only.
package testutil

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// RequireRoot skips a privileged test (network namespaces, CNI, iptables)
// with a clear message unless it runs as root. MESHLET_SKIP_PRIVILEGED=1
// skips it even as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Getenv("MESHLET_SKIP_PRIVILEGED") == "1" {
		t.Skip("privileged test skipped: MESHLET_SKIP_PRIVILEGED=1")
	}
	if os.Geteuid() != 0 {
		t.Skip("privileged test skipped: needs root (network namespaces, CNI, iptables); run `sudo make test`")
	}
}

// WaitFor polls cond every 20ms until it returns true or timeout passes,
// then fails the test with msg. It is a correctness wait, not a timing
// assertion: timeouts are generous.
func WaitFor(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WriteScript writes an executable shell script called name into a fresh
// directory that every user may enter (0755), for stand-ins of binaries
// that a test runs as another user (a fake envoy run as nobody), and
// returns its path. The directory is removed when the test ends.
func WriteScript(t testing.TB, name, script string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "meshlet-script-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}
