package connecthook

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/client/allocdir"
	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// A service's http check decides its instance's health and its sidecar's
// (alias check) in the catalog: critical until the first pass, passing,
// critical again when the app fails it. The check dials 127.0.0.1 on the
// host here (no namespace path); in an allocation it dials inside it.
func TestServiceChecksDriveHealth(t *testing.T) {
	var failing atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" || failing.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	job := &structs.Job{ID: "j", Name: "j", TaskGroups: []*structs.TaskGroup{{
		Name:     "web",
		Networks: []*structs.NetworkResource{{Mode: "bridge"}},
		Services: []*structs.Service{{Name: "web", PortLabel: port,
			Checks: []structs.ServiceCheck{{Name: "alive", Type: "http", Path: "/health",
				Interval: 50 * time.Millisecond, Timeout: time.Second}},
			Connect: &structs.ConsulConnect{SidecarService: &structs.ConsulSidecarService{DisableDefaultTCPCheck: true}}}},
		Tasks: []*structs.Task{{Name: "web", Driver: "raw_exec"}},
	}}}
	if err := connect.Inject(job); err != nil {
		t.Fatal(err)
	}
	alloc := &structs.Allocation{ID: "a1", Job: job, TaskGroup: "web", AllocatedResources: &structs.AllocatedResources{
		Shared: structs.AllocatedSharedResources{Ports: []structs.PortMapping{{Label: "connect-proxy-web", Value: 21000, To: 21000}}},
	}}
	cat := catalog.New()
	ad := allocdir.New(t.TempDir(), alloc.ID)
	if err := ad.Build([]string{"web", "connect-proxy-web"}, nil); err != nil {
		t.Fatal(err)
	}
	hc := &allocrunner.AllocHookContext{Alloc: alloc, AllocDir: ad, Logger: hclog.NewNullLogger(),
		NetworkStatus: &structs.AllocNetworkStatus{Address: "10.9.0.2"}}
	h := &ServicesHook{d: Deps{Catalog: cat, NodeID: "n1", Datacenter: "dc1"}}
	if err := h.Prerun(context.Background(), hc); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Postrun(context.Background(), hc) }()

	appID := connect.ServiceID("a1", "web", "web", port)
	health := func() (app, proxy catalog.ServiceInstance) {
		app, _ = cat.Get(appID)
		proxy, _ = cat.Get(connect.ProxyID(appID))
		return app, proxy
	}
	app, proxy := health()
	if app.ID == "" || proxy.ID == "" || len(app.Checks) != 1 || app.Checks[0].ID != "service:"+appID+":1" {
		t.Fatalf("registered app %+v, proxy %+v: want both, with the check", app, proxy)
	}
	testutil.WaitFor(t, 10*time.Second, "the check to pass", func() bool {
		app, proxy = health()
		return app.Healthy && proxy.Healthy && app.Checks[0].Status == "passing" && len(proxy.Checks) == 1 && proxy.Checks[0].Type == "alias"
	})
	failing.Store(true)
	testutil.WaitFor(t, 10*time.Second, "the failing check to turn the app and its sidecar critical", func() bool {
		app, proxy = health()
		return !app.Healthy && !proxy.Healthy && proxy.Checks[0].Status == "critical"
	})
	if got := app.Checks[0].Output; got == "" {
		t.Error("a critical check without output")
	}
	failing.Store(false)
	testutil.WaitFor(t, 10*time.Second, "healthy again", func() bool {
		app, proxy = health()
		return app.Healthy && proxy.Healthy
	})
	_ = h.Postrun(context.Background(), hc)
	if len(cat.All()) != 0 {
		t.Fatalf("instances left after Postrun: %d", len(cat.All()))
	}
}

// Nomad's default sidecar check: TCP to the proxy's public port. The proxy
// starts healthy (the check starts passing) and turns critical once
// nothing listens there.
func TestDefaultSidecarCheck(t *testing.T) {
	defer func(d time.Duration) { sidecarCheckInterval = d }(sidecarCheckInterval)
	sidecarCheckInterval = 50 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	job := &structs.Job{ID: "j", Name: "j", TaskGroups: []*structs.TaskGroup{{
		Name:     "web",
		Networks: []*structs.NetworkResource{{Mode: "bridge"}},
		Services: []*structs.Service{{Name: "web", PortLabel: "8080",
			Connect: &structs.ConsulConnect{SidecarService: &structs.ConsulSidecarService{}}}},
		Tasks: []*structs.Task{{Name: "web", Driver: "raw_exec"}},
	}}}
	if err := connect.Inject(job); err != nil {
		t.Fatal(err)
	}
	alloc := &structs.Allocation{ID: "a2", Job: job, TaskGroup: "web", AllocatedResources: &structs.AllocatedResources{
		Shared: structs.AllocatedSharedResources{Ports: []structs.PortMapping{{Label: "connect-proxy-web", Value: port, To: port}}},
	}}
	cat := catalog.New()
	hc := &allocrunner.AllocHookContext{Alloc: alloc, AllocDir: allocdir.New(t.TempDir(), alloc.ID), Logger: hclog.NewNullLogger(),
		NetworkStatus: &structs.AllocNetworkStatus{Address: "10.9.0.3"}}
	h := &ServicesHook{d: Deps{Catalog: cat, NodeID: "n1", Datacenter: "dc1"}}
	if err := h.Prerun(context.Background(), hc); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Postrun(context.Background(), hc) }()
	proxyID := connect.ProxyID(connect.ServiceID("a2", "web", "web", "8080"))
	proxy, _ := cat.Get(proxyID)
	if !proxy.Healthy || len(proxy.Checks) != 1 || proxy.Checks[0].Type != "tcp" {
		t.Fatalf("proxy registered %+v, want healthy with the default tcp check", proxy)
	}
	time.Sleep(300 * time.Millisecond) // several runs against the listener
	if proxy, _ = cat.Get(proxyID); !proxy.Healthy {
		t.Fatalf("proxy unhealthy while its port listens: %+v", proxy.Checks)
	}
	_ = ln.Close()
	testutil.WaitFor(t, 10*time.Second, "the proxy critical once nothing listens", func() bool {
		proxy, _ = cat.Get(proxyID)
		return !proxy.Healthy
	})
	if app, _ := cat.Get(connect.ServiceID("a2", "web", "web", "8080")); !app.Healthy {
		t.Error("the app (no checks of its own) turned unhealthy with its sidecar")
	}
}
