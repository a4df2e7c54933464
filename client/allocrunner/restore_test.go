package allocrunner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/client/allocdir"
	clientstate "github.com/meshlet/meshlet/client/state"
	"github.com/meshlet/meshlet/client/taskrunner"
	"github.com/meshlet/meshlet/cni"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/rawexec"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// fullDisk is the client state on a full disk: every write fails.
type fullDisk struct{ *clientstate.DB }

var errNoSpace = fmt.Errorf("failed to write client state: %w", syscall.ENOSPC)

func (fullDisk) PutAlloc(*structs.Allocation) error                             { return errNoSpace }
func (fullDisk) PutTaskState(string, string, *clientstate.LocalTaskState) error { return errNoSpace }
func (fullDisk) PutNetworkStatus(string, *structs.AllocNetworkStatus) error     { return errNoSpace }

// staticNet is a Networker whose allocation network needs no namespace
// (the write-failure tests are about the client's own state).
type staticNet struct{ restoreErr error }

func (staticNet) Setup(context.Context, *structs.Allocation) (*structs.AllocNetworkStatus, error) {
	return &structs.AllocNetworkStatus{InterfaceName: "eth0", Address: "10.9.0.2"}, nil
}
func (n staticNet) Restore(ctx context.Context, a *structs.Allocation) (*structs.AllocNetworkStatus, error) {
	if n.restoreErr != nil {
		return nil, n.restoreErr
	}
	return n.Setup(ctx, a)
}
func (staticNet) Teardown(context.Context, *structs.Allocation) error { return nil }
func (staticNet) NetNSPath(string) string                             { return "" }

func hasEvent(s *structs.TaskState, typ string) bool {
	for _, e := range s.Events {
		if e.Type == typ {
			return true
		}
	}
	return false
}

// TestRestoreFailuresKeepTasksRunning: at an agent restart, a step that
// fails to restore a running allocation (its network record cannot be
// written on a full disk, its network cannot be re-checked, its control
// plane socket cannot be made again) leaves the tasks running, with an
// event saying so; before, the allocation was rolled back and killed.
func TestRestoreFailuresKeepTasksRunning(t *testing.T) {
	tests := []struct {
		name  string
		state func(*clientstate.DB) clientstate.Store
		hooks func(h *harness, st clientstate.Store) []AllocHook
	}{
		{"network record write fails (full disk)", func(db *clientstate.DB) clientstate.Store { return fullDisk{db} },
			func(h *harness, st clientstate.Store) []AllocHook {
				return []AllocHook{NewNetworkHook(staticNet{}, "", st), &recorder{name: "sidecar", log: h.log}}
			}},
		{"network restore fails", func(db *clientstate.DB) clientstate.Store { return db },
			func(h *harness, st clientstate.Store) []AllocHook {
				return []AllocHook{NewNetworkHook(staticNet{restoreErr: errNoSpace}, "", st), &recorder{name: "sidecar", log: h.log}}
			}},
		{"socket cannot be re-created", func(db *clientstate.DB) clientstate.Store { return db },
			func(h *harness, st clientstate.Store) []AllocHook {
				return []AllocHook{NewNetworkHook(staticNet{}, "", st),
					&recorder{name: "sidecar", log: h.log, prerunErr: errors.New("failed to place the control plane socket in the allocation")}}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "service", task("proxy", "prestart", true), task("app", "", false))
			h.alloc.Job.TaskGroups[0].Networks = []*structs.NetworkResource{{Mode: "bridge"}}
			ar := h.runner(false, NewNetworkHook(staticNet{}, "", h.db), &recorder{name: "sidecar", log: h.log})
			go ar.Run()
			testutil.WaitFor(t, hang, "both tasks running", func() bool { return len(h.drv.Running()) == 2 })
			h.waitStatus(ar, structs.AllocClientStatusRunning)
			ar.Shutdown()

			st := tc.state(h.db)
			tasks, err := h.db.TaskStates(h.alloc.ID)
			if err != nil {
				t.Fatal(err)
			}
			ar2, err := New(Config{Alloc: h.alloc, Node: &structs.Node{ID: "n1"}, AllocDir: ar.cfg.AllocDir,
				Driver: ar.cfg.Driver, State: st, Hooks: tc.hooks(h, st), Restored: true, RestoredTasks: tasks})
			if err != nil {
				t.Fatal(err)
			}
			go ar2.Run()
			t.Cleanup(ar2.Shutdown)
			testutil.WaitFor(t, hang, "tasks recovered", func() bool {
				return strings.Count(strings.Join(h.drv.Calls(), ";"), "Recover") == 2
			})
			h.waitStatus(ar2, structs.AllocClientStatusRunning)
			v := ar2.ClientView()
			for name, s := range v.TaskStates {
				if !hasEvent(s, taskrunner.TaskRestoreDegraded) {
					t.Errorf("task %s has no %q event: %+v", name, taskrunner.TaskRestoreDegraded, s.Events)
				}
			}
			if len(h.drv.Running()) != 2 || strings.Contains(strings.Join(h.drv.Calls(), ";"), "Stop") {
				t.Fatalf("restore stopped tasks: running %v, calls %v", h.drv.Running(), h.drv.Calls())
			}
			if strings.Contains(h.log.String(), "postrun") {
				t.Fatalf("restore rolled back: %s", h.log)
			}
			if v.NetworkStatus == nil || v.NetworkStatus.Address != "10.9.0.2" {
				t.Errorf("network status lost: %+v", v.NetworkStatus)
			}
		})
	}
}

// ipNetns is a Networker with real namespaces made by `ip netns`: Restore
// makes the namespace again when it is gone, as the CNI manager does.
type ipNetns struct{ name string }

func (n ipNetns) Setup(context.Context, *structs.Allocation) (*structs.AllocNetworkStatus, error) {
	if out, err := exec.Command("ip", "netns", "add", n.name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add: %w: %s", err, out)
	}
	return &structs.AllocNetworkStatus{InterfaceName: "eth0", Address: "10.9.0.2"}, nil
}
func (n ipNetns) Restore(ctx context.Context, a *structs.Allocation) (*structs.AllocNetworkStatus, error) {
	if _, err := NetNSInode(n.NetNSPath(a.ID)); err == nil {
		return &structs.AllocNetworkStatus{InterfaceName: "eth0", Address: "10.9.0.2"}, nil
	}
	_ = exec.Command("ip", "netns", "del", n.name).Run()
	st, err := n.Setup(ctx, a)
	if err != nil {
		return nil, err
	}
	// The CNI manager's contract: the new status with ErrNamespaceLost.
	return st, fmt.Errorf("allocation %s: %w (new address %s)", a.ID, cni.ErrNamespaceLost, st.Address)
}
func (n ipNetns) Teardown(context.Context, *structs.Allocation) error {
	_ = exec.Command("ip", "netns", "del", n.name).Run()
	return nil
}
func (n ipNetns) NetNSPath(string) string { return "/var/run/netns/" + n.name }

// nsLines reads the "<pid> net:[<inode>]" lines the task appends at every
// start.
func nsLines(t *testing.T, path string) [][2]uint64 {
	b, _ := os.ReadFile(path)
	var out [][2]uint64
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		pid, _ := strconv.ParseUint(f[0], 10, 64)
		ino, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(f[1], "net:["), "]"), 10, 64)
		out = append(out, [2]uint64{pid, ino})
	}
	return out
}

// TestRestoreIntoRecreatedNamespace: the namespace of a running allocation
// is deleted while the agent is down; the restarted agent makes a new one,
// and the task must be restarted inside it (before, it stayed in the dead
// namespace while its status said running).
func TestRestoreIntoRecreatedNamespace(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2")
	}
	dir := t.TempDir()
	db, err := clientstate.Open(filepath.Join(dir, "client", "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	netw := ipNetns{name: "mltest-" + uuid.NewString()[:8]}
	t.Cleanup(func() { _ = netw.Teardown(context.Background(), nil) })
	script := `echo "$$ $(readlink /proc/self/ns/net)" >> "$NOMAD_TASK_DIR/ns"; exec sleep 600`
	tk := &structs.Task{Name: "app", Driver: "raw_exec", Config: map[string]any{"command": "/bin/sh", "args": []any{"-c", script}}}
	job := &structs.Job{ID: "j", Name: "j", Type: structs.JobTypeService, TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 1,
		Networks: []*structs.NetworkResource{{Mode: "bridge"}}, Tasks: []*structs.Task{tk}}}}
	alloc := &structs.Allocation{ID: uuid.NewString(), Name: "j.g[0]", JobID: "j", TaskGroup: "g", Job: job, DesiredStatus: structs.AllocDesiredStatusRun}
	drv := rawexec.New(rawexec.Config{StateDir: t.TempDir()}, hclog.NewNullLogger())
	ad := allocdir.New(filepath.Join(dir, "alloc"), alloc.ID)
	newRunner := func(restored bool) *AllocRunner {
		tasks, err := db.TaskStates(alloc.ID)
		if err != nil {
			t.Fatal(err)
		}
		ar, err := New(Config{Alloc: alloc, Node: &structs.Node{ID: "n1"}, AllocDir: ad, State: db,
			Driver: func(string) (driver.Driver, error) { return drv, nil }, Hooks: []AllocHook{NewNetworkHook(netw, "", db)},
			Restored: restored, RestoredTasks: tasks})
		if err != nil {
			t.Fatal(err)
		}
		go ar.Run()
		return ar
	}
	nsFile := filepath.Join(ad.TaskDir("app").LocalDir, "ns")
	ar := newRunner(false)
	testutil.WaitFor(t, hang, "task started", func() bool { return len(nsLines(t, nsFile)) == 1 })
	first := nsLines(t, nsFile)[0]
	ar.Shutdown()
	if out, err := exec.Command("ip", "netns", "del", netw.name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del: %v: %s", err, out)
	}

	ar = newRunner(true)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		_ = ar.Destroy(ctx)
	})
	testutil.WaitFor(t, hang, "task restarted into the new namespace", func() bool { return len(nsLines(t, nsFile)) == 2 })
	testutil.WaitFor(t, hang, "running", func() bool { return ar.ClientView().ClientStatus == structs.AllocClientStatusRunning })
	second := nsLines(t, nsFile)[1]
	ino, err := NetNSInode(netw.NetNSPath(alloc.ID))
	if err != nil {
		t.Fatal(err)
	}
	if second[1] != ino || second[1] == first[1] {
		t.Fatalf("task runs in namespace %d, the allocation's is %d (the old one was %d)", second[1], ino, first[1])
	}
	if err := syscall.Kill(int(first[0]), 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the task left in the old namespace (pid %d) is still alive: %v", first[0], err)
	}
}

// lostNet reports, as the CNI manager does, that it had to make the
// allocation's namespace anew: the new status and cni.ErrNamespaceLost.
type lostNet struct{ staticNet }

func (lostNet) Restore(context.Context, *structs.Allocation) (*structs.AllocNetworkStatus, error) {
	return &structs.AllocNetworkStatus{InterfaceName: "eth0", Address: "10.9.0.77"},
		fmt.Errorf("allocation x: %w", cni.ErrNamespaceLost)
}

// A namespace the Networker says it recreated is not a failed restore: the
// hook takes the new status and asks for the tasks to be restarted into it.
func TestNetworkHookTakesRecreatedNamespace(t *testing.T) {
	h := newHarness(t, "service", task("app", "", false))
	h.alloc.Job.TaskGroups[0].Networks = []*structs.NetworkResource{{Mode: "bridge"}}
	hc := &AllocHookContext{Alloc: h.alloc, Restored: true, Logger: hclog.NewNullLogger()}
	if err := NewNetworkHook(lostNet{}, "", h.db).Prerun(context.Background(), hc); err != nil {
		t.Fatalf("Prerun: %v", err)
	}
	if !hc.NetworkRecreated {
		t.Error("NetworkRecreated not set: the tasks would stay in the lost namespace")
	}
	if hc.NetworkStatus == nil || hc.NetworkStatus.Address != "10.9.0.77" {
		t.Errorf("network status = %+v, want the new namespace's address", hc.NetworkStatus)
	}
	if st, err := h.db.NetworkStatus(h.alloc.ID); err != nil || st == nil || st.Address != "10.9.0.77" {
		t.Errorf("persisted network status = %+v, %v", st, err)
	}
}

// A restored allocation's first published view (before the network hook
// re-attached) keeps the address its tasks still use: it was reported
// running without one, then with it again.
func TestRestoredViewKeepsNetworkStatus(t *testing.T) {
	h := newHarness(t, "service", task("app", "", false))
	st := &structs.AllocNetworkStatus{InterfaceName: "eth0", Address: "10.9.0.5"}
	if err := h.db.PutNetworkStatus(h.alloc.ID, st); err != nil {
		t.Fatal(err)
	}
	ar := h.runner(true)
	if v := ar.ClientView(); v.NetworkStatus == nil || v.NetworkStatus.Address != "10.9.0.5" {
		t.Fatalf("restored view before prerun has network status %+v, want the stored 10.9.0.5", v.NetworkStatus)
	}
}

// movedNet restores the allocation's network in the same namespace but on
// another address, as a rebuild after a failed check may.
type movedNet struct{ staticNet }

func (movedNet) Restore(context.Context, *structs.Allocation) (*structs.AllocNetworkStatus, error) {
	return &structs.AllocNetworkStatus{InterfaceName: "eth0", Address: "10.9.0.9"}, nil
}

// A network restored on another address than the persisted one is a
// recreated network: the tasks hold the old address (NOMAD_ALLOC_IP_*,
// bound sockets) and must be restarted into it. The same address is not.
func TestNetworkHookRestartsTasksOnNewAddress(t *testing.T) {
	for _, tc := range []struct {
		name string
		net  Networker
		want bool
	}{
		{"address changed", movedNet{}, true},
		{"address kept", staticNet{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "service", task("app", "", false))
			h.alloc.Job.TaskGroups[0].Networks = []*structs.NetworkResource{{Mode: "bridge"}}
			if err := h.db.PutNetworkStatus(h.alloc.ID, &structs.AllocNetworkStatus{InterfaceName: "eth0", Address: "10.9.0.2"}); err != nil {
				t.Fatal(err)
			}
			hc := &AllocHookContext{Alloc: h.alloc, Restored: true, Logger: hclog.NewNullLogger()}
			if err := NewNetworkHook(tc.net, "", h.db).Prerun(context.Background(), hc); err != nil {
				t.Fatalf("Prerun: %v", err)
			}
			if hc.NetworkRecreated != tc.want {
				t.Errorf("NetworkRecreated = %v, want %v (address 10.9.0.2 -> %s)", hc.NetworkRecreated, tc.want, hc.NetworkStatus.Address)
			}
		})
	}
}
