package docker

import (
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
