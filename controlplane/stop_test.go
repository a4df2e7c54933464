package controlplane

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
)

func startControlPlane(t *testing.T) *ControlPlane {
	t.Helper()
	cp, err := New(Config{DataDir: t.TempDir(), DefaultAllow: true, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}, catalog.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Start(); err != nil {
		_ = cp.Stop()
		t.Fatal(err)
	}
	return cp
}

// A 10-minute blocking query in flight returns as soon as Stop is called,
// Stop returns no error (nothing had to be cut), and the request's
// goroutines are gone afterwards.
func TestStopEndsBlockingQueries(t *testing.T) {
	base := runtime.NumGoroutine()
	cp := startControlPlane(t)
	client, err := consulapi.NewClient(&consulapi.Config{Address: cp.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]func(q *consulapi.QueryOptions) (*consulapi.QueryMeta, error){
		"catalog": func(q *consulapi.QueryOptions) (*consulapi.QueryMeta, error) {
			_, m, err := client.Catalog().Services(q)
			return m, err
		},
		"health": func(q *consulapi.QueryOptions) (*consulapi.QueryMeta, error) {
			_, m, err := client.Health().Connect("web", "", false, q)
			return m, err
		},
		"intentions": func(q *consulapi.QueryOptions) (*consulapi.QueryMeta, error) {
			_, m, err := client.Connect().Intentions(q)
			return m, err
		},
		"ca roots": func(q *consulapi.QueryOptions) (*consulapi.QueryMeta, error) {
			_, m, err := client.Agent().ConnectCARoots(q)
			return m, err
		},
	}
	returned := make(chan string, len(kinds))
	for name, query := range kinds {
		go func() {
			// Blocks at the store's own index (one ahead of it would be
			// answered at once as an index that went backwards); again
			// after a change, until the control plane is gone.
			q := &consulapi.QueryOptions{WaitTime: 10 * time.Minute}
			for {
				meta, err := query(q)
				if err != nil {
					break
				}
				q.WaitIndex = meta.LastIndex
			}
			returned <- name
		}()
	}
	waitRequests(t, cp, len(kinds))
	stopped := make(chan error, 1)
	go func() { stopped <- cp.Stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Stop still waits for blocking queries after 3s")
	}
	for range kinds {
		select {
		case <-returned:
		case <-time.After(3 * time.Second):
			t.Fatal("a blocking query is still in flight after Stop")
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Stop, %d before Start:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitRequests waits until n requests are being served (blocked).
func waitRequests(t *testing.T, cp *ControlPlane, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		buf := make([]byte, 1<<20)
		if strings.Count(string(buf[:runtime.Stack(buf, true)]), "consulapi.(*Server).block(") >= n {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("fewer than %d blocking queries started", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
