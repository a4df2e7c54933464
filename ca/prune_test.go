package ca

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/internal/testutil"
)

// newLoggedManager is newTestManager with a debug logger writing to the
// returned buffer.
func newLoggedManager(t *testing.T, cfg Config) (*Manager, *testutil.SyncBuffer) {
	t.Helper()
	logs := &testutil.SyncBuffer{}
	m, err := New(cfg, hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug}), nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m, logs
}

func isPrune(prev, next *StoredState) bool {
	return prev != nil && len(next.Roots) < len(prev.Roots)
}

// TestPruneConflictIsQuiet: another server drops the same old root from
// the same state first (every server prunes at the same moment); this
// one's write conflicts, its reload picks up the result, and nothing is
// logged as an error.
func TestPruneConflictIsQuiet(t *testing.T) {
	st := &casStorage{}
	var raced atomic.Bool
	st.beforeSave = func(prev, next *StoredState) error {
		if isPrune(prev, next) && raced.CompareAndSwap(false, true) {
			return st.Save(context.Background(), prev, cloneState(next)) // the other server
		}
		return nil
	}
	m, logs := newLoggedManager(t, Config{Storage: st, LeafTTL: time.Hour, RootOverlap: time.Nanosecond})
	if err := m.Rotate(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the old root dropped", func() bool {
		return raced.Load() && len(m.Roots().Roots) == 1
	})
	stored := st.load(t)
	if len(stored.Roots) != 1 || stored.Roots[0].ID != m.Roots().ActiveRootID || st.saveCount() != 3 {
		t.Fatalf("stored %d roots (active %s, manager's %s) after %d saves; want 1, the same, 3 saves",
			len(stored.Roots), storedActiveID(stored), m.Roots().ActiveRootID, st.saveCount())
	}
	out := logs.String()
	if strings.Contains(out, "[ERROR]") || !strings.Contains(out, "reloaded it") {
		t.Fatalf("a lost prune race is logged as an error or not at all:\n%s", out)
	}
}

// TestFailedPruneRetried: a prune whose write fails (storage
// unreachable, disk full) is tried again with a backoff, without any
// other event.
func TestFailedPruneRetried(t *testing.T) {
	st := &casStorage{}
	var attempts atomic.Int32
	st.beforeSave = func(prev, next *StoredState) error {
		if isPrune(prev, next) && attempts.Add(1) <= 3 {
			return errors.New("disk full")
		}
		return nil
	}
	m, logs := newLoggedManager(t, Config{Storage: st, LeafTTL: time.Hour, RootOverlap: time.Nanosecond})
	m.mu.Lock()
	m.pruneRetryMin = 20 * time.Millisecond
	m.mu.Unlock()
	if err := m.Rotate(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "the old root dropped after failed attempts", func() bool {
		return len(st.load(t).Roots) == 1
	})
	if n := attempts.Load(); n != 4 {
		t.Fatalf("%d prune attempts, want 3 failed and 1 good", n)
	}
	if len(m.Roots().Roots) != 1 {
		t.Fatal("the manager kept the dropped root")
	}
	if out := logs.String(); strings.Count(out, "failed to drop old CA roots") != 3 {
		t.Fatalf("want 3 prune errors logged:\n%s", out)
	}
	m.mu.RLock()
	wait, retry := m.pruneWait, m.pruneRetry
	m.mu.RUnlock()
	if wait != 0 || retry != nil {
		t.Fatalf("backoff %s, retry timer %v after the success", wait, retry)
	}
}

// TestPruneKeepsCurrentLeaves: dropping the old root once every leaf was
// re-issued under the new one re-issues nothing (as Consul re-issues a
// leaf only when the active root changed), on this server, on a server
// that reloads the pruned state and on a client agent that gets the
// pruned roots: a prune is not a second fleet-wide re-issue.
func TestPruneKeepsCurrentLeaves(t *testing.T) {
	ctx := context.Background()
	st := &casStorage{}
	lim := &countingLimiter{}
	m := newTestManager(t, Config{Storage: st, LeafTTL: time.Hour, RootOverlap: 300 * time.Millisecond, Limiter: lim})
	other := newTestManager(t, Config{Storage: st, LeafTTL: time.Hour, RootOverlap: time.Hour})
	client := newTestManager(t, Config{Signer: signerFunc(other.SignCSR)})
	if err := client.SetRoots(m.Roots()); err != nil {
		t.Fatal(err)
	}
	for _, svc := range []string{"web", "db"} {
		mustLeaf(t, m, svc)
		mustLeaf(t, other, svc)
		mustLeaf(t, client, svc)
	}
	if err := m.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if err := client.SetRoots(m.Roots()); err != nil {
		t.Fatal(err)
	}
	newSigner := activeSigner(m)
	reissued := func(mgr *Manager) bool {
		for _, svc := range []string{"web", "db"} {
			if l := cachedLeaf(mgr, svc); l == nil || signerOf(t, l) != newSigner {
				return false
			}
		}
		return true
	}
	testutil.WaitFor(t, 10*time.Second, "leaves re-issued under the new root", func() bool {
		return reissued(m) && reissued(other) && reissued(client)
	})
	before := map[*Manager][2]string{}
	for _, mgr := range []*Manager{m, other, client} {
		before[mgr] = [2]string{cachedLeaf(mgr, "web").SerialNumber, cachedLeaf(mgr, "db").SerialNumber}
	}
	testutil.WaitFor(t, 10*time.Second, "old root dropped", func() bool { return len(m.Roots().Roots) == 1 })
	if err := other.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if err := client.SetRoots(m.Roots()); err != nil {
		t.Fatal(err)
	}
	if len(other.Roots().Roots) != 1 || len(client.Roots().Roots) != 1 {
		t.Fatal("the pruned roots did not reach the other server and the client")
	}
	time.Sleep(300 * time.Millisecond)
	for mgr, serials := range before {
		if got := [2]string{cachedLeaf(mgr, "web").SerialNumber, cachedLeaf(mgr, "db").SerialNumber}; got != serials {
			t.Errorf("leaves re-issued after the prune (serials %v, were %v)", got, serials)
		}
	}
	if n := lim.calls.Load(); n != 4 {
		t.Errorf("%d signings on the pruning server, want 4 (2 leaves, 2 re-issued at rotation)", n)
	}
}
