package cni

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/structs"
)

// hangingPlugin returns a copy of the real plugins in which plugin name,
// on the CNI command cmd (a shell case pattern: "DEL", "ADD|DEL"), creates
// the file started and then waits until the returned release func is
// called (or the test ends); it then runs the real plugin.
func hangingPlugin(t *testing.T, name, cmd string) (dir, started string, release func()) {
	t.Helper()
	dir = copyPlugins(t, name)
	ctl := t.TempDir()
	started, gate := filepath.Join(ctl, "started"), filepath.Join(ctl, "release")
	script := fmt.Sprintf("#!/bin/sh\ncase \"$CNI_COMMAND\" in %s)\n  : > %q\n  while [ ! -e %q ]; do sleep 0.05; done\nesac\nexec %q \"$@\"\n",
		cmd, started, gate, filepath.Join(realPluginDir(t), name))
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Errorf("release the hanging plugin: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return dir, started, release
}

// waitFile waits up to d for path to exist.
func waitFile(t *testing.T, path string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s did not appear within %s", path, d)
}

// hungTeardown starts tearing down b with another Manager whose portmap
// plugin hangs on DEL, and returns once the plugin hangs. The teardown's
// result arrives on done after release.
func hungTeardown(t *testing.T, tn *testNet, b *structs.Allocation) (done <-chan error, release func()) {
	t.Helper()
	cfg := tn.cfg
	var started string
	cfg.PluginDir, started, release = hangingPlugin(t, "portmap", "DEL")
	hung, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	bDone := make(chan error, 1)
	go func() { bDone <- hung.Teardown(context.Background(), b) }()
	waitFile(t, started, 30*time.Second)
	return bDone, release
}

// TestHungTeardownBlocksNoOtherAllocation: while allocation B's teardown
// hangs in its portmap plugin, allocation A is set up and torn down
// (another Manager on the same network, as after an agent restart, so no
// lock of a Manager's own could hide a process-wide one).
func TestHungTeardownBlocksNoOtherAllocation(t *testing.T) {
	tn := newTestNet(t)
	b := tn.alloc(structs.PortMapping{Label: "http", Value: freePort(t), To: 80})
	tn.setup(b)
	bDone, release := hungTeardown(t, tn, b)

	a := tn.alloc(structs.PortMapping{Label: "http", Value: freePort(t), To: 80})
	m2 := tn.newManager()
	aDone := make(chan error, 1)
	go func() {
		st, err := m2.Setup(context.Background(), a)
		if err == nil && !strings.HasPrefix(st.Address, tn.prefix) {
			err = fmt.Errorf("status %+v has no address in %s", st, tn.cfg.Subnet)
		}
		if err == nil {
			err = m2.Teardown(context.Background(), a)
		}
		aDone <- err
	}()
	select {
	case err := <-aDone:
		if err != nil {
			t.Fatalf("A's Setup/Teardown while B's teardown hangs: %v", err)
		}
	case <-time.After(60 * time.Second):
		release()
		<-aDone
		t.Fatal("A's Setup/Teardown waited for B's hung teardown (a lock wider than one allocation)")
	}
	select {
	case err := <-bDone:
		t.Fatalf("B's teardown returned (%v) before its plugin was released: the hang was not real", err)
	default:
	}
	release()
	if err := <-bDone; err != nil {
		t.Fatalf("B's teardown after the release: %v", err)
	}
	tn.requireClean(a.ID, b.ID)
}

// TestSameAllocationWaitsForItsLock: operations on one allocation are
// still serialized, and a waiter gives up when its context ends.
func TestSameAllocationWaitsForItsLock(t *testing.T) {
	tn := newTestNet(t)
	// A mapped port: hungTeardown hangs portmap's DEL.
	b := tn.alloc(structs.PortMapping{Label: "http", Value: freePort(t), To: 80})
	tn.setup(b)
	bDone, release := hungTeardown(t, tn, b)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	restored := make(chan error, 1)
	go func() {
		_, err := tn.m.Restore(ctx, b)
		restored <- err
	}()
	select {
	case err := <-restored:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Restore of an allocation being torn down = %v; want it to wait and give up with its context", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("Restore of an allocation being torn down ignored its context")
		release()
		<-restored
	}
	release()
	if err := <-bDone; err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	tn.requireClean(b.ID)
}

// TestConcurrentSetupTeardown sets up allocations concurrently, then tears
// half of them down while setting up as many new ones, then tears all down:
// every call succeeds, addresses are distinct, nothing is left, and the
// firewall's shared rules were added once.
func TestConcurrentSetupTeardown(t *testing.T) {
	tn := newTestNet(t)
	const n = 16
	first := make([]*structs.Allocation, n)
	second := make([]*structs.Allocation, n/2)
	for i := range first {
		first[i] = tn.alloc(structs.PortMapping{Label: "http", Value: freePort(t), To: 8080})
	}
	for i := range second {
		second[i] = tn.alloc()
	}
	var mu sync.Mutex
	addrs := map[string]string{}
	setup := func(a *structs.Allocation) error {
		st, err := tn.m.Setup(t.Context(), a)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if other, dup := addrs[st.Address]; dup {
			return fmt.Errorf("address %s given to %s and %s", st.Address, other, a.ID)
		}
		addrs[st.Address] = a.ID
		if got, err := eth0Addr(tn.m.NetNSPath(a.ID)); err != nil || got != st.Address {
			return fmt.Errorf("eth0 of %s has %q (%v), status says %s", a.ID, got, err, st.Address)
		}
		return nil
	}
	teardown := func(a *structs.Allocation) error { return tn.m.Teardown(t.Context(), a) }
	run := func(phase string, jobs []func() error) {
		t.Helper()
		errs := make(chan error, len(jobs))
		for _, j := range jobs {
			go func() { errs <- j() }()
		}
		for range jobs {
			if err := <-errs; err != nil {
				t.Errorf("%s: %v", phase, err)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	var jobs []func() error
	for _, a := range first {
		jobs = append(jobs, func() error { return setup(a) })
	}
	run("concurrent Setup", jobs)
	jobs = nil
	for i, a := range first[:n/2] {
		jobs = append(jobs, func() error { return teardown(a) }, func() error { return setup(second[i]) })
	}
	run("concurrent Teardown and Setup", jobs)
	jobs = nil
	for _, a := range append(first[n/2:], second...) {
		jobs = append(jobs, func() error { return teardown(a) })
	}
	run("concurrent Teardown", jobs)
	ids := make([]string, 0, len(first)+len(second))
	for _, a := range append(first, second...) {
		ids = append(ids, a.ID)
	}
	tn.requireClean(ids...)
	if got := adminRuleCount(t, tn.cfg.AdminChain); got != 1 {
		t.Fatalf("CNI-FORWARD jumps to %s %d times, want once (the first ADD sets the shared rules up alone)", tn.cfg.AdminChain, got)
	}
}

// adminRuleCount counts the firewall plugin's jumps to chain in CNI-FORWARD.
func adminRuleCount(t *testing.T, chain string) int {
	out, err := exec.Command("iptables", "-w", "10", "-t", "filter", "-S", "CNI-FORWARD").Output()
	if err != nil {
		t.Fatalf("iptables -S CNI-FORWARD: %v", err)
	}
	return strings.Count(string(out), "-j "+chain+"\n")
}

// TestKeyedMutex: one key is exclusive, other keys are not blocked, a
// waiter gives up with its context, and no entry outlives its users.
func TestKeyedMutex(t *testing.T) {
	k := newKeyedMutex()
	unlockA, err := k.lock(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	unlockB, err := k.lock(t.Context(), "b")
	if err != nil {
		t.Fatalf("lock of another key while a is held: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := k.lock(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock of a held key = %v; want it to give up with its context", err)
	}
	got := make(chan func(), 1)
	go func() {
		u, err := k.lock(context.Background(), "a")
		if err != nil {
			t.Error(err)
		}
		got <- u
	}()
	unlockA()
	(<-got)()
	unlockB()
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.entries) != 0 {
		t.Fatalf("%d entries left after every lock was released", len(k.entries))
	}
}

// shortCleanup is the cleanup timeout of the managers whose plugin hangs.
const shortCleanup = time.Second

// within waits up to 30 s for done; then it releases the hung plugin and
// fails the test.
func within(t *testing.T, done <-chan error, release func(), what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		release()
		t.Fatalf("%s still running after 30s, with cleanups bounded at %s (then: %v)", what, shortCleanup, <-done)
		return nil
	}
}

// TestHungRollbackIsBounded: a Setup whose plugin hangs on ADD, and then
// on the DEL of the rollback, returns an error once its context and the
// cleanup's bound have run out, instead of holding the allocation's lock
// and the caller forever. What the unfinished DEL may still need stays
// (the record, the lease, the cached config) and GC removes it all once
// the plugin works.
func TestHungRollbackIsBounded(t *testing.T) {
	tn := newTestNet(t)
	a := tn.alloc(structs.PortMapping{Label: "http", Value: freePort(t), To: 80})
	cfg := tn.cfg
	var release func()
	cfg.PluginDir, _, release = hangingPlugin(t, "portmap", "ADD|DEL")
	hung, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	hung.cleanupTimeout = shortCleanup
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := hung.Setup(ctx, a); done <- err }()
	if err := within(t, done, release, "Setup"); err == nil {
		t.Fatal("Setup whose ADD hung returned no error")
	}
	if _, err := os.Stat(tn.m.recordPath(a.ID)); err != nil {
		t.Fatalf("namespace record gone after an unfinished rollback (GC could not finish it): %v", err)
	}
	release()
	if err := tn.newManager().GC(t.Context(), liveIDs()); err != nil {
		t.Fatalf("GC once the plugin works: %v", err)
	}
	tn.requireClean(a.ID)
}

// TestHungGCIsBounded: GC gives each dead allocation's DEL at most
// the cleanup timeout, so one hanging plugin neither blocks GC nor keeps it from
// the other dead allocations; the hung one is reported and collected by a
// later GC.
func TestHungGCIsBounded(t *testing.T) {
	tn := newTestNet(t)
	hungAlloc := tn.alloc(structs.PortMapping{Label: "http", Value: freePort(t), To: 80})
	other := tn.alloc() // no port: its network has no portmap
	tn.setup(hungAlloc)
	tn.setup(other)
	cfg := tn.cfg
	var release func()
	cfg.PluginDir, _, release = hangingPlugin(t, "portmap", "DEL")
	hung, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	hung.cleanupTimeout = shortCleanup
	done := make(chan error, 1)
	go func() { done <- hung.GC(t.Context(), liveIDs()) }()
	if err := within(t, done, release, "GC"); err == nil || !strings.Contains(err.Error(), hungAlloc.ID) {
		t.Fatalf("GC with a hung DEL = %v, want an error naming %s", err, hungAlloc.ID)
	}
	if r := tn.residueOf([]string{other.ID}, nil); len(r) > 0 {
		t.Fatalf("GC did not collect the other dead allocation:\n  %s", strings.Join(r, "\n  "))
	}
	if _, err := os.Stat(tn.m.recordPath(hungAlloc.ID)); err != nil {
		t.Fatalf("record of the allocation whose DEL hung is gone: %v", err)
	}
	release()
	if err := tn.newManager().GC(t.Context(), liveIDs()); err != nil {
		t.Fatalf("GC once the plugin works: %v", err)
	}
	tn.requireClean(hungAlloc.ID, other.ID)
}
