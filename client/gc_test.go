package client

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/client/internal/fakedriver"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/server"
	"github.com/meshlet/meshlet/structs"
)

// replaceTimes runs job r and updates it n times: each update replaces the
// running allocation, leaving a terminal one behind. It returns the
// allocations, oldest first.
func replaceTimes(t *testing.T, c *Client, n int) []*structs.Allocation {
	t.Helper()
	ctx := context.Background()
	srv := c.cfg.Server.(*server.Server)
	for i := range n + 1 {
		j := job("r", "")
		j.TaskGroups[0].Tasks[0].Env = map[string]string{"V": fmt.Sprint(i)}
		if _, err := srv.RegisterJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, hang, fmt.Sprintf("version %d running", i), func() bool {
			allocs, _ := srv.JobAllocs(ctx, "r")
			return len(allocs) == i+1 && allocs[i].ClientStatus == structs.AllocClientStatusRunning
		})
	}
	allocs, err := srv.JobAllocs(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	return allocs
}

func newGCClient(t *testing.T, cfg Config) (*Client, *fakedriver.Driver) {
	t.Helper()
	srv := newServer(t)
	drv := fakedriver.New("raw_exec")
	cfg.DataDir, cfg.NodeName, cfg.Server = t.TempDir(), "n1", srv
	cfg.Drivers = []driver.Driver{drv}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })
	return c, drv
}

func collected(c *Client, a *structs.Allocation) bool {
	local, _ := c.db.TaskStates(a.ID)
	return c.runner(a.ID) == nil && !c.allocDir(a.ID).Exists() && len(local) == 0
}

// TestGCKeepsAtMostMaxAllocs: replaced allocations are destroyed on the
// client (runner, alloc dir, logs, local state) beyond GCMaxAllocs, oldest
// first; the server keeps their records and they are not run again.
func TestGCKeepsAtMostMaxAllocs(t *testing.T) {
	c, drv := newGCClient(t, Config{GCMaxAllocs: 2})
	allocs := replaceTimes(t, c, 3) // 3 terminal + 1 running
	testutil.WaitFor(t, hang, "two oldest collected", func() bool {
		return collected(c, allocs[0]) && collected(c, allocs[1])
	})
	for _, a := range allocs[2:] {
		if c.runner(a.ID) == nil || !c.allocDir(a.ID).Exists() {
			t.Fatalf("allocation %s collected, want kept", a.ID)
		}
	}
	c.reconcile(mustAllocs(t, c)) // the server still lists them: nothing runs again
	if n := strings.Count(strings.Join(drv.Calls(), ","), "Start t"); n != 4 || len(drv.Running()) != 1 {
		t.Fatalf("%d starts, %d running after GC", n, len(drv.Running()))
	}
}

// TestGCTerminalAllocsAfterTTL: a terminal allocation older than
// GCAllocTTL is collected even under GCMaxAllocs; a running one never.
func TestGCTerminalAllocsAfterTTL(t *testing.T) {
	c, _ := newGCClient(t, Config{GCAllocTTL: time.Nanosecond, GCInterval: 10 * time.Millisecond})
	allocs := replaceTimes(t, c, 2)
	testutil.WaitFor(t, hang, "terminal allocations collected", func() bool {
		return collected(c, allocs[0]) && collected(c, allocs[1])
	})
	if last := allocs[2]; c.runner(last.ID) == nil || !c.allocDir(last.ID).Exists() {
		t.Fatal("the running allocation was collected")
	}
}

func mustAllocs(t *testing.T, c *Client) []*structs.Allocation {
	t.Helper()
	allocs, _, err := c.cfg.Server.NodeAllocs(context.Background(), c.node.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return allocs
}

// TestGCOnDiskUsage: over the disk usage threshold every terminal
// allocation is collected, under GCMaxAllocs and before GCAllocTTL; a
// running one never.
func TestGCOnDiskUsage(t *testing.T) {
	var mu sync.Mutex
	usage := 50.0
	c, _ := newGCClient(t, Config{GCInterval: 10 * time.Millisecond, GCDiskUsageThreshold: 90, DiskUsage: func() (float64, error) {
		mu.Lock()
		defer mu.Unlock()
		return usage, nil
	}})
	allocs := replaceTimes(t, c, 2)
	time.Sleep(100 * time.Millisecond) // ~10 passes under the threshold
	if collected(c, allocs[0]) || collected(c, allocs[1]) {
		t.Fatal("terminal allocations collected under the disk threshold, max allocs and TTL")
	}
	mu.Lock()
	usage = 95
	mu.Unlock()
	testutil.WaitFor(t, hang, "terminal allocations collected over the disk threshold", func() bool {
		return collected(c, allocs[0]) && collected(c, allocs[1])
	})
	if last := allocs[2]; c.runner(last.ID) == nil || !c.allocDir(last.ID).Exists() {
		t.Fatal("the running allocation was collected")
	}
}

// TestGCOnDiskUsageOldestFirstUntilUnder: over the disk threshold the
// oldest terminal allocation is collected, then the usage is measured
// again; collection stops once it is under the threshold. Here each
// terminal allocation's alloc dir weighs 5 %: with four of them at 100 %
// and a threshold of 90 %, the two oldest go.
func TestGCOnDiskUsageOldestFirstUntilUnder(t *testing.T) {
	var mu sync.Mutex
	var c *Client
	var terminal []*structs.Allocation
	var readings []float64
	usage := func() (float64, error) {
		mu.Lock()
		defer mu.Unlock()
		pct := 50.0
		if terminal != nil {
			pct = 80
			for _, a := range terminal {
				if c.allocDir(a.ID).Exists() {
					pct += 5
				}
			}
		}
		readings = append(readings, pct)
		return pct, nil
	}
	cl, _ := newGCClient(t, Config{GCInterval: 10 * time.Millisecond, GCDiskUsageThreshold: 90, DiskUsage: usage})
	allocs := replaceTimes(t, cl, 4)
	mu.Lock()
	c, terminal = cl, allocs[:4]
	mu.Unlock()
	testutil.WaitFor(t, hang, "the two oldest collected", func() bool {
		return collected(cl, allocs[0]) && collected(cl, allocs[1])
	})
	time.Sleep(100 * time.Millisecond) // ~10 more passes at 90 %
	for _, a := range allocs[2:] {
		if cl.runner(a.ID) == nil || !cl.allocDir(a.ID).Exists() {
			t.Fatalf("allocation %s collected once the usage was under the threshold", a.ID)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if i := slices.Index(readings, 95); i < 0 || !slices.Contains(readings[i:], 90) {
		t.Fatalf("usage readings %v: want 100, 95 (one collected), 90", readings)
	}
}

func TestDiskUsageOfARealFilesystem(t *testing.T) {
	pct, err := diskUsage(t.TempDir())
	if err != nil || pct <= 0 || pct > 100 {
		t.Fatalf("diskUsage = %v, %v; want a percentage in (0, 100]", pct, err)
	}
}
