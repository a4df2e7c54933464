package agent

import (
	"runtime"
	"strings"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
	nomad "github.com/hashicorp/nomad/api"
)

// Blocking queries in flight on both APIs (10-minute waits) return as soon
// as the agent shuts down, Shutdown reports no error, and no goroutine of
// the agent outlives it.
func TestShutdownEndsBlockingQueries(t *testing.T) {
	base := runtime.NumGoroutine()
	a := startAgent(t, t.TempDir())
	nc, err := nomad.NewClient(&nomad.Config{Address: "http://" + a.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := consul.NewClient(&consul.Config{Address: a.ControlPlane().HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	returned := make(chan string, 2)
	go func() {
		_, _, _ = nc.Jobs().List(&nomad.QueryOptions{WaitIndex: a.Backend().Index() + 1000, WaitTime: 10 * time.Minute})
		returned <- "nomad"
	}()
	go func() {
		// Blocks at the catalog's own index (one ahead of it would be
		// answered at once as an index that went backwards); again after
		// a change, until the agent is gone.
		q := &consul.QueryOptions{WaitTime: 10 * time.Minute}
		for {
			_, meta, err := cc.Catalog().Services(q)
			if err != nil {
				break
			}
			q.WaitIndex = meta.LastIndex
		}
		returned <- "consul"
	}()
	waitStack(t, []string{"meshlet/api.(*Server).block(", "/consulapi/server.go:"})
	done := make(chan error, 1)
	go func() { done <- a.Shutdown() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Shutdown still waits for blocking queries after 3s")
	}
	for range 2 {
		select {
		case <-returned:
		case <-time.After(3 * time.Second):
			t.Fatal("a blocking query is still in flight after Shutdown")
		}
	}
	nc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Shutdown, %d before Start:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitStack waits until every marker appears in the goroutine stacks.
func waitStack(t *testing.T, markers []string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		all := true
		for _, m := range markers {
			all = all && strings.Contains(stacks, m)
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not all of %v started", markers)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
