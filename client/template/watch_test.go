package template

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/client/taskrunner"
	"github.com/meshlet/meshlet/structs"
)

// The file poll is not a change: a template reading a file whose wait.min
// is longer than the poll period picks a change up after wait.min, not
// after wait.max (each poll used to push its quiet period back).
func TestFilePollDoesNotDeferToWaitMax(t *testing.T) {
	tm := fastTmpl("restart")
	tm.EmbeddedTmpl = sp(`cfg={{ file "local/in.txt" }}`)
	tm.Wait = &structs.WaitConfig{Min: sp(200 * time.Millisecond), Max: sp(4 * time.Second)}
	f := newFixture(t, tm) // polls every 50ms
	in := filepath.Join(f.dirs.TaskDir, "local", "in.txt")
	if err := os.MkdirAll(filepath.Dir(in), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.prestart(t, f.hook, false)
	if err := os.WriteFile(in, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out := f.hook.tmpls[0].out.path()
	eventually(t, "the re-render", func() bool { return read(t, out) == "cfg=two" })
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("re-rendered after %v: the wait.max, not the wait.min", d)
	}
}

// A template is deferred only by changes to the services it reads: a
// stream of changes to another service does not hold a change to its own
// back to wait.max (any change used to restart every quiet period).
func TestUnrelatedChangesDoNotDefer(t *testing.T) {
	tm := fastTmpl("restart")
	tm.Wait = &structs.WaitConfig{Min: sp(time.Second), Max: sp(4 * time.Second)}
	f := newFixture(t, tm)
	f.register(1)
	f.prestart(t, f.hook, false)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { // another service changes every 50ms
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			f.cat.Register(catalog.ServiceInstance{ID: "other", Name: "other", Port: i, Healthy: i%2 == 0})
		}
	}()
	defer func() { close(stop); <-done }()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	f.register(2)
	out := f.hook.tmpls[0].out.path()
	eventually(t, "the re-render", func() bool { return read(t, out) == "10.0.0.1:8001\n10.0.0.2:8002\n" })
	if d := time.Since(start); d < 900*time.Millisecond || d > 2*time.Second {
		t.Errorf("re-rendered after %v, want about the wait.min (1s)", d)
	}
	eventually(t, "the restart", func() bool { r, _, _ := f.rec.snapshot(); return len(r) == 1 })
}

// A change taken by the first render while one template still waited for
// data re-renders the templates that had rendered before it.
func TestChangeDuringFirstRenderNotLost(t *testing.T) {
	db := fastTmpl("restart")
	db.EmbeddedTmpl, db.DestPath = sp(`{{ range service "db" }}{{ .Port }}{{ end }}`), sp("local/db.txt")
	f := newFixture(t, fastTmpl("restart"), db)
	f.register(1)
	f.hook.task = f.rec // to see the Missing event
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() { done <- f.hook.Prestart(ctx, taskrunner.TaskHookRequest{}) }()
	eventually(t, "the Missing event", func() bool {
		_, _, msgs := f.rec.snapshot()
		return slices.Contains(msgs, TaskHookMessage+": Missing: health.service(db|passing)")
	})
	f.register(2) // after api.txt rendered
	time.Sleep(100 * time.Millisecond)
	f.cat.Register(catalog.ServiceInstance{ID: "db-1", Name: "db", Port: 5432, Healthy: true})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.hook.Stop)
	out := f.hook.tmpls[0].out.path()
	eventually(t, "api.txt with both instances", func() bool { return read(t, out) == "10.0.0.1:8001\n10.0.0.2:8002\n" })
}

// What a template read decides which catalog changes schedule it.
func TestAffectedBy(t *testing.T) {
	api := map[string]bool{"api": true}
	tests := []struct {
		name string
		t    tmpl
		ch   map[string]bool
		all  bool
		want bool
	}{
		{"reads the changed service", tmpl{rendered: true, reads: api}, api, false, true},
		{"reads another service", tmpl{rendered: true, reads: api}, map[string]bool{"db": true}, false, false},
		{"reads no service", tmpl{rendered: true, reads: map[string]bool{}}, api, false, false},
		{"change naming no service", tmpl{rendered: true, reads: api}, nil, true, true},
		{"reads every service", tmpl{rendered: true, reads: map[string]bool{}, readsAll: true}, api, false, true},
		{"not rendered yet", tmpl{reads: map[string]bool{"db": true}}, api, false, true},
		{"last render failed", tmpl{rendered: true}, api, false, true},
	}
	for _, tc := range tests {
		if got := tc.t.affectedBy(tc.ch, tc.all); got != tc.want {
			t.Errorf("%s: affectedBy %v, want %v", tc.name, got, tc.want)
		}
	}
}
