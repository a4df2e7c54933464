package allocrunner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/client/internal/fakedriver"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// A dead leader stops its followers as a stop does: PreKill first (the
// services leave the catalog before the followers are killed), not only
// at postrun after the poststop tasks.
func TestLeaderDeathRunsPreKill(t *testing.T) {
	leader := task("leader", "", false)
	leader.Leader = true
	h := newHarness(t, "service", leader, task("follower", "", false), task("cleanup", "poststop", false))
	h.drv.Script("leader", fakedriver.Behavior{ExitAfter: 50 * time.Millisecond})
	h.drv.Script("cleanup", fakedriver.Behavior{ExitAfter: 50 * time.Millisecond})
	ar := h.runner(false, &recorder{name: "services", log: h.log})
	go ar.Run()
	waitDone(t, ar)
	if got, want := h.log.String(), "prerun services restored=false,prekill services,postrun services"; got != want {
		t.Fatalf("hooks = %s, want %s", got, want)
	}
	if i, j := indexPrefix(h.drv.Calls(), "Stop follower"), index(h.drv.Calls(), "Start cleanup"); i < 0 || j < i {
		t.Fatalf("calls %v: the follower is not stopped before the poststop task", h.drv.Calls())
	}
}

// A stop kills the leader first, then the other tasks, then the sidecars,
// a poststart sidecar (a log shipper) included: it outlives the app.
func TestStopKillsLeaderThenTasksThenSidecars(t *testing.T) {
	leader := task("leader", "", false)
	leader.Leader = true
	h := newHarness(t, "service", leader, task("app", "", false), task("proxy", "prestart", true), task("shipper", "poststart", true))
	ar := h.runner(false)
	go ar.Run()
	h.waitStatus(ar, structs.AllocClientStatusRunning)
	testutil.WaitFor(t, hang, "the poststart sidecar started", func() bool { return index(h.drv.Calls(), "Start shipper") >= 0 })
	ar.Kill()
	waitDone(t, ar)
	finished := func(name string) time.Time { return ar.TaskRunner(name).State().FinishedAt }
	if !finished("leader").Before(finished("app")) {
		t.Errorf("leader finished at %v, app at %v: the leader is not killed first", finished("leader"), finished("app"))
	}
	for _, sidecar := range []string{"proxy", "shipper"} {
		if !finished(sidecar).After(finished("app")) {
			t.Errorf("sidecar %s finished at %v, app at %v: sidecars are not killed last", sidecar, finished(sidecar), finished("app"))
		}
	}
}

// A batch job's main task finishing does not kill an ephemeral poststart
// task still at work (only sidecars are killed then): it runs to its end.
func TestEphemeralPoststartRunsToItsEnd(t *testing.T) {
	h := newHarness(t, "batch", task("main", "", false), task("notify", "poststart", false), task("proxy", "prestart", true))
	h.drv.Script("main", fakedriver.Behavior{ExitAfter: 50 * time.Millisecond})
	h.drv.Script("notify", fakedriver.Behavior{ExitAfter: 400 * time.Millisecond})
	ar := h.runner(false)
	go ar.Run()
	waitDone(t, ar)
	st := ar.TaskRunner("notify").State()
	for _, e := range st.Events {
		if e.Type == structs.TaskKilled || e.Type == structs.TaskKilling {
			t.Fatalf("the ephemeral poststart task was killed when main completed: %+v", e)
		}
	}
	if st.Failed || !strings.Contains(eventTypes(st), structs.TaskTerminated) {
		t.Fatalf("notify's events = %s, want it terminated by itself", eventTypes(st))
	}
	if ps := ar.TaskRunner("proxy").State(); !strings.Contains(eventTypes(ps), structs.TaskKilled) {
		t.Fatalf("the sidecar was not killed once only sidecars were left: %s", eventTypes(ps))
	}
}

func indexPrefix(calls []string, prefix string) int {
	for i, x := range calls {
		if strings.HasPrefix(x, prefix) {
			return i
		}
	}
	return -1
}

// destroyProbe's Destroy hangs (stuck) or records whether its context was
// still live when called.
type destroyProbe struct {
	name  string
	stuck bool
	live  chan bool
}

func (d *destroyProbe) Name() string                                     { return d.name }
func (d *destroyProbe) Prerun(context.Context, *AllocHookContext) error  { return nil }
func (d *destroyProbe) Postrun(context.Context, *AllocHookContext) error { return nil }
func (d *destroyProbe) Destroy(ctx context.Context, _ *AllocHookContext) error {
	if d.stuck {
		<-ctx.Done()
		return ctx.Err()
	}
	d.live <- ctx.Err() == nil
	return nil
}

// Each hook's Destroy has its own time limit: a stuck one (run first, in
// reverse order) leaves the hooks before it their full time.
func TestDestroyHookTimeoutPerHook(t *testing.T) {
	old := HookDestroyTimeout
	HookDestroyTimeout = 100 * time.Millisecond
	t.Cleanup(func() { HookDestroyTimeout = old })
	h := newHarness(t, "batch", task("app", "", false))
	h.drv.Script("app", fakedriver.Behavior{ExitAfter: 10 * time.Millisecond})
	network := &destroyProbe{name: "network", live: make(chan bool, 1)}
	ar := h.runner(false, network, &destroyProbe{name: "stuck", stuck: true})
	go ar.Run()
	waitDone(t, ar)
	if err := ar.Destroy(context.Background()); err == nil {
		t.Fatal("Destroy reported no error for the stuck hook")
	}
	if live := <-network.live; !live {
		t.Fatal("the hook after the stuck one got an expired context")
	}
}
