package command

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
)

// snapshotBackend keeps the state as one blob; a restore of anything that
// does not start with its magic is refused as a damaged snapshot.
type snapshotBackend struct {
	*apitest.Backend
	mu     sync.Mutex
	state  []byte
	forced bool
}

const snapshotMagic = "SNAP:"

func (b *snapshotBackend) SaveSnapshot(_ context.Context, w io.Writer) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, err := w.Write(b.state)
	return err
}

func (b *snapshotBackend) RestoreSnapshot(_ context.Context, r io.Reader, opts api.SnapshotRestoreOptions) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(raw, []byte(snapshotMagic)) {
		return fmt.Errorf("invalid state snapshot: not a gzip stream: %w", api.ErrInvalid)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state, b.forced = raw, opts.Force
	return nil
}

func newSnapshotAgent(t *testing.T) *snapshotBackend {
	t.Helper()
	b := &snapshotBackend{Backend: apitest.NewBackend(), state: []byte(snapshotMagic + strings.Repeat("state ", 50000))}
	srv := httptest.NewServer(api.NewServer(b, hclog.NewNullLogger()).Handler())
	t.Cleanup(srv.Close)
	t.Setenv("MESHLET_ADDR", srv.URL)
	return b
}

func TestOperatorSnapshotSaveRestore(t *testing.T) {
	b := newSnapshotAgent(t)
	saved := b.state
	dir := t.TempDir()
	path := filepath.Join(dir, "backup.snap")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "", "operator", "snapshot", "save", path)
	if r.code != 0 || r.stdout != "State file written to "+path+"\n" {
		t.Fatalf("save: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, saved) {
		t.Fatalf("saved file: %d bytes (%v), want %d", len(got), err, len(saved))
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("saved file mode: %v %v, want 0600", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d entries after save, want only the snapshot", len(entries))
	}

	b.state = []byte(snapshotMagic + "changed")
	if r := runCLI(t, "", "operator", "snapshot", "restore", path); r.code != 0 || r.stdout != "Snapshot restored\n" {
		t.Fatalf("restore: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if !bytes.Equal(b.state, saved) || b.forced {
		t.Errorf("backend state after restore: %d bytes, forced %v; want the saved %d bytes", len(b.state), b.forced, len(saved))
	}
	if r := runCLI(t, "", "operator", "snapshot", "restore", "-force", path); r.code != 0 || !b.forced {
		t.Errorf("restore -force: exit %d (%s), forced %v", r.code, r.stderr, b.forced)
	}
}

func TestOperatorSnapshotErrors(t *testing.T) {
	b := newSnapshotAgent(t)
	bad := writeFile(t, "bad.snap", "garbage")
	r := runCLI(t, "", "operator", "snapshot", "restore", bad)
	if r.code != 1 || !strings.Contains(r.stderr, "invalid state snapshot") || !strings.Contains(r.stderr, "HTTP 400") {
		t.Errorf("restore of a bad file: exit %d, stderr %q", r.code, r.stderr)
	}
	if !bytes.HasPrefix(b.state, []byte(snapshotMagic+"state")) {
		t.Errorf("a refused restore changed the state")
	}
	if r := runCLI(t, "", "operator", "snapshot", "restore", filepath.Join(t.TempDir(), "missing")); r.code != 1 ||
		!strings.Contains(r.stderr, "no such file") {
		t.Errorf("restore of a missing file: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, args := range [][]string{{"save"}, {"restore"}, {"save", "a", "b"}} {
		r := runCLI(t, "", append([]string{"operator", "snapshot"}, args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, "Usage: meshlet operator snapshot "+args[0]) {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	// A save into a missing directory fails and leaves nothing behind.
	if r := runCLI(t, "", "operator", "snapshot", "save", filepath.Join(t.TempDir(), "no", "dir", "x.snap")); r.code != 1 {
		t.Errorf("save into a missing directory: exit %d", r.code)
	}
	// An agent without snapshots.
	plain := httptest.NewServer(api.NewServer(apitest.NewBackend(), hclog.NewNullLogger()).Handler())
	defer plain.Close()
	dir := t.TempDir()
	r = runCLI(t, "", "operator", "snapshot", "save", "-address", plain.URL, filepath.Join(dir, "x.snap"))
	if r.code != 1 || !strings.Contains(r.stderr, "HTTP 501") {
		t.Errorf("save from an agent without snapshots: exit %d, stderr %q", r.code, r.stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a failed save left %d files", len(entries))
	}
}

// TestWriteAtomicallyKeepsOldFile: a stream that fails midway (as the
// official client's reader does on a digest mismatch) leaves the old file.
func TestWriteAtomicallyKeepsOldFile(t *testing.T) {
	path := writeFile(t, "keep.snap", "old")
	failing := io.MultiReader(strings.NewReader("partial"), &errReader{errors.New("checksum mismatch")})
	if err := writeAtomically(path, failing); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("writeAtomically = %v", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("file after a failed write = %q, want the old content", got)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("a failed write left %d entries", len(entries))
	}
}

type errReader struct{ err error }

func (r *errReader) Read([]byte) (int, error) { return 0, r.err }
