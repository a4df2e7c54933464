package command

import (
	"strings"
	"testing"
)

// `connect proxy -concurrency` rejects a negative thread count before
// contacting anything.
func TestConnectProxyConcurrencyFlag(t *testing.T) {
	r := runCLI(t, "", "connect", "proxy", "-proxy-id", "web-sidecar-proxy", "-service", "web", "-concurrency", "-1")
	if r.code == 0 || !strings.Contains(r.stderr, "-concurrency must be 0 or more") {
		t.Fatalf("code %d stderr %q", r.code, r.stderr)
	}
}
