package docker

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// One image under any of its names: a use acquired as "redis" and
// released as "docker.io/library/redis:latest" leaves no reference behind,
// and the owned image is scheduled for collection.
func TestImageGCNormalizesReferences(t *testing.T) {
	d := &Driver{cfg: Config{StateDir: t.TempDir(), GCImageDelay: time.Hour}, logger: hclog.NewNullLogger()}
	g := newImageGC(d)
	defer g.stop()
	g.pulled("redis:latest")
	g.acquire("redis", "task-1")
	g.release("docker.io/library/redis:latest", "task-1")
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.refs) != 0 {
		t.Errorf("references left: %v", g.refs)
	}
	if g.timers["docker.io/library/redis:latest"] == nil || len(g.timers) != 1 {
		t.Errorf("timers = %v, want the owned image's removal scheduled", g.timers)
	}
	if got := imageKey("not a reference!"); got != "not a reference!" {
		t.Errorf("an unparsable reference became %q", got)
	}
}

// The owner ID is made once and kept; an emptied (corrupt) file is left
// for the operator, not replaced by a new ID that would disown every
// container labelled with the old one.
func TestOwnerIDKeptAndNotReplaced(t *testing.T) {
	dir := t.TempDir()
	newDriver := func() *Driver { return &Driver{cfg: Config{StateDir: dir}, logger: hclog.NewNullLogger()} }
	first := newDriver().owner()
	if len(first) != 32 || first == dir {
		t.Fatalf("owner ID %q, want a random hex ID", first)
	}
	if again := newDriver().owner(); again != first {
		t.Fatalf("owner ID after a restart %q, want %q", again, first)
	}
	path := filepath.Join(dir, ownerFile)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// An emptied file is kept for the operator, and the label in use is
	// one no other agent can take for its own: not the state directory's
	// path, which another agent with the same data_dir would sweep.
	d := newDriver()
	got := d.owner()
	if len(got) != 32 || got == first || got == dir {
		t.Errorf("with an empty owner file the label is %q, want a new random ID that is not kept", got)
	}
	if b, _ := os.ReadFile(path); len(b) != 0 {
		t.Errorf("the empty owner file was replaced by %q", b)
	}
	if !d.owns(got) || d.owns(first) || d.owns("") {
		t.Error("owns() does not match the label in use")
	}
	other := &Driver{cfg: Config{StateDir: dir}, logger: hclog.NewNullLogger()}
	if other.owns(got) {
		t.Error("another agent with the same state directory takes the fallback label for its own")
	}
}
