package server

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/internal/etcdembed"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/state"
	"github.com/meshlet/meshlet/structs"
)

// countingStore is the agent's store (etcd) counting the full reads of a
// node's allocations.
type countingStore struct {
	*state.EtcdStore
	byNode atomic.Int64
}

func (c *countingStore) AllocsByNode(nodeID string) ([]*structs.Allocation, error) {
	c.byNode.Add(1)
	return c.EtcdStore.AllocsByNode(nodeID)
}

func openEtcdStore(t *testing.T) *countingStore {
	t.Helper()
	return openEtcdStoreOps(t, 0)
}

// openEtcdStoreOps is openEtcdStore with the member's --max-txn-ops (0:
// the embedded default).
func openEtcdStoreOps(t *testing.T, maxTxnOps uint) *countingStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := etcdembed.Start(ctx, etcdembed.Config{
		DataDir: filepath.Join(t.TempDir(), "etcd"), Name: "server-test",
		ClientURL: fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t)),
		PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t)),
		Logger:    hclog.NewNullLogger(), Dev: true, MaxTxnOps: maxTxnOps,
	})
	if err != nil {
		t.Fatalf("etcd member: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	st, err := state.OpenEtcd(ctx, m.Client(), state.EtcdOptions{Prefix: "/meshlet-test/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return &countingStore{EtcdStore: st}
}

// TestNodeAllocsSkipsClientUpdates: while a node's allocations report
// progress, its blocked fetch stays blocked without decoding the node's
// allocations for each report (it did once per report: a node starting n
// allocations cost O(n²) decodes); an allocation turning terminal and a
// server-side change still wake it.
func TestNodeAllocsSkipsClientUpdates(t *testing.T) {
	ctx := context.Background()
	st := openEtcdStore(t)
	s := startServer(t, st, Config{})
	if _, err := s.RegisterJob(ctx, testJob("many", "raw_exec", 20)); err != nil {
		t.Fatal(err)
	}
	allocs, idx, err := s.NodeAllocs(ctx, "node-1", 0)
	if err != nil || len(allocs) != 20 {
		t.Fatalf("NodeAllocs = %d allocations, %v", len(allocs), err)
	}
	type answer struct {
		allocs []*structs.Allocation
		err    error
	}
	fetch := func(min uint64) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			c, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			a, _, err := s.NodeAllocs(c, "node-1", min)
			ch <- answer{a, err}
		}()
		return ch
	}
	before := st.byNode.Load()
	woke := fetch(idx)
	for _, status := range []string{structs.AllocClientStatusPending, structs.AllocClientStatusRunning} {
		for _, a := range allocs {
			setClientStatus(t, s, status, a)
		}
	}
	select {
	case got := <-woke:
		t.Fatalf("client status reports woke the node's fetch: %d allocations, %v", len(got.allocs), got.err)
	case <-time.After(300 * time.Millisecond):
	}
	if n := st.byNode.Load() - before; n > 2 {
		t.Errorf("the node's allocations were decoded %d times for 40 client reports; want at most 2", n)
	}
	setClientStatus(t, s, structs.AllocClientStatusFailed, allocs[3])
	select {
	case got := <-woke:
		if got.err != nil || len(got.allocs) != 20 {
			t.Fatalf("after a failure: %d allocations, %v", len(got.allocs), got.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an allocation turning terminal did not wake the node's fetch")
	}
}

// A removal of one of the node's allocations wakes the node's blocked
// fetch even when the servers read the node's allocations in between (a
// leaf request's check): that read is not the node's fetch.
func TestNodeAllocsRemovalWakesAfterServerRead(t *testing.T) {
	ctx := context.Background()
	st := openEtcdStore(t)
	s := startServer(t, st, Config{})
	if _, err := s.RegisterJob(ctx, testJob("web", "raw_exec", 2)); err != nil {
		t.Fatal(err)
	}
	allocs, idx, err := s.NodeAllocs(ctx, "node-1", 0)
	if err != nil || len(allocs) != 2 {
		t.Fatalf("NodeAllocs = %d, %v", len(allocs), err)
	}
	if _, err := st.DeleteAllocs([]string{allocs[0].ID}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.AllocsOnNode(ctx, "node-1"); err != nil || len(got) != 1 {
		t.Fatalf("AllocsOnNode = %d, %v", len(got), err)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	got, _, err := s.NodeAllocs(wctx, "node-1", idx)
	if err != nil || wctx.Err() != nil || len(got) != 1 {
		t.Fatalf("the node's fetch after the removal: %d allocations, %v, woken by its deadline: %v", len(got), err, wctx.Err() != nil)
	}
}
