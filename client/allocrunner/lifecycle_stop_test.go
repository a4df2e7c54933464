package allocrunner

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/client/internal/fakedriver"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/structs"
)

// A stop persisted by Update, then an agent restart before the kill
// finished: the restored runner still stops the tasks.
func TestRestoredDesiredStopIsKilled(t *testing.T) {
	h := newHarness(t, "service", task("app", "", false))
	ar := h.runner(false)
	go ar.Run()
	h.waitStatus(ar, structs.AllocClientStatusRunning)
	stop := *h.alloc
	stop.DesiredStatus = structs.AllocDesiredStatusStop
	if err := h.db.PutAlloc(&stop); err != nil { // what Update writes before Kill
		t.Fatal(err)
	}
	ar.Shutdown() // crash / restart before the kill happened
	h.alloc = &stop
	ar2 := h.runner(true)
	go ar2.Run()
	time.Sleep(500 * time.Millisecond)
	if v := ar2.ClientView(); v.ClientStatus == structs.AllocClientStatusRunning {
		t.Fatalf("restored alloc with desired_status=stop still running: %v running=%v", v.ClientStatus, h.drv.Running())
	}
}

// An agent shutdown while a replacement waits for its previous
// allocation leaves it pending for the next agent (it was marked complete
// and never ran).
func TestShutdownBeforeStartLeavesAllocPending(t *testing.T) {
	h := newHarness(t, "service", task("app", "", false))
	h.alloc.PreviousAllocation = "prev"
	ar := h.runner(false)
	ar.cfg.PrevAlloc = func(ctx context.Context, id string) { <-ctx.Done() }
	go ar.Run()
	time.Sleep(100 * time.Millisecond)
	ar.Shutdown()
	v := ar.ClientView()
	ls, _ := h.db.TaskStates(h.alloc.ID)
	t.Logf("status after shutdown = %s, persisted app state = %s", v.ClientStatus, ls["app"].State.State)
	if v.TerminalStatus() || ls["app"].State.State == structs.TaskStateDead {
		t.Fatalf("agent shutdown made a never-started alloc terminal: %s", v.ClientStatus)
	}
}

// A prestart sidecar that fails for good after main started fails the
// allocation and kills its siblings, as Nomad (the app ran on without its
// proxy).
func TestSidecarFailureAfterMainFailsAlloc(t *testing.T) {
	h := newHarness(t, "service", task("app", "", false), task("proxy", "prestart", true))
	h.drv.Script("proxy", fakedriver.Behavior{ExitAfter: 300 * time.Millisecond, Exit: driver.ExitResult{ExitCode: 1}})
	ar := h.runner(false)
	go ar.Run()
	h.waitStatus(ar, structs.AllocClientStatusRunning)
	time.Sleep(time.Second)
	p := ar.TaskRunner("proxy").State()
	a := ar.TaskRunner("app").State()
	t.Logf("proxy=%s failed=%v app=%s alloc=%s", p.State, p.Failed, a.State, ar.ClientView().ClientStatus)
	if p.Failed && a.State == structs.TaskStateRunning {
		t.Fatalf("sidecar failed but main task keeps running; alloc status %s", ar.ClientView().ClientStatus)
	}
	ar.Kill()
	waitDone(t, ar)
}

// Views reach OnUpdate in the order of the states they show: with task
// runners publishing from their own goroutines while the allocation ends,
// the last view handed over is the terminal one (an older running view
// handed over last overwrote it on the servers).
func TestPublishOrder(t *testing.T) {
	for i := 0; i < 5; i++ {
		h := newHarness(t, "batch", task("a", "", false), task("b", "", false), task("c", "", false))
		for _, name := range []string{"a", "b", "c"} {
			h.drv.Script(name, fakedriver.Behavior{ExitAfter: 20 * time.Millisecond, Exit: driver.ExitResult{ExitCode: 0}})
		}
		var mu sync.Mutex
		var last *structs.Allocation
		terminal := make(chan struct{})
		var once sync.Once
		ar := h.runner(false)
		ar.cfg.OnUpdate = func(v *structs.Allocation) {
			if !v.TerminalStatus() {
				// Hold a non-terminal view between building and handing
				// over until a terminal one was handed over (or briefly).
				select {
				case <-terminal:
				case <-time.After(50 * time.Millisecond):
				}
			}
			mu.Lock()
			last = v
			mu.Unlock()
			if v.TerminalStatus() {
				once.Do(func() { close(terminal) })
			}
		}
		go ar.Run()
		waitDone(t, ar)
		time.Sleep(100 * time.Millisecond) // past any held view
		mu.Lock()
		got := last.ClientStatus
		mu.Unlock()
		if got != structs.AllocClientStatusComplete {
			t.Fatalf("round %d: the last view handed over is %q, want complete", i, got)
		}
	}
}

// blockingHook's Prerun waits for release (a slow network setup).
type blockingHook struct {
	recorder
	entered, release chan struct{}
}

func (b *blockingHook) Prerun(ctx context.Context, hc *AllocHookContext) error {
	close(b.entered)
	<-b.release
	return b.recorder.Prerun(ctx, hc)
}

// A stop that arrives while the allocation's hooks set it up starts
// nothing, as one that arrives before: no task of any lifecycle is
// started only to be killed (after the group's shutdown_delay), and the
// hooks are rolled back.
func TestStoppedDuringSetupRunsNothing(t *testing.T) {
	for name, tasks := range map[string][]*structs.Task{
		"main only":     {task("app", "", false)},
		"with prestart": {task("app", "", false), task("proxy", "prestart", true), task("init", "prestart", false)},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, "service", tasks...)
			delay := 2 * time.Second
			h.alloc.Job.TaskGroups[0].ShutdownDelay = &delay
			hook := &blockingHook{recorder: recorder{name: "network", log: h.log}, entered: make(chan struct{}), release: make(chan struct{})}
			ar := h.runner(false, hook)
			go ar.Run()
			<-hook.entered
			ar.Update(&structs.Allocation{ID: h.alloc.ID, Job: h.alloc.Job, TaskGroup: "g", DesiredStatus: structs.AllocDesiredStatusStop})
			close(hook.release)
			waitDone(t, ar)
			if calls := h.drv.Calls(); len(calls) != 0 {
				t.Fatalf("driver calls %v after a stop during setup", calls)
			}
			if st := ar.ClientView().ClientStatus; st != structs.AllocClientStatusComplete || !strings.HasSuffix(h.log.String(), "postrun network") {
				t.Fatalf("status %s, hooks %s", st, h.log)
			}
		})
	}
}
