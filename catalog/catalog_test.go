package catalog

import (
	"errors"
	"reflect"
	"testing"
)

func TestRegisterDeregisterNotifies(t *testing.T) {
	c := New()
	var got []Change
	cancel := c.Subscribe(func(ch Change) { got = append(got, ch) })
	c.Register(ServiceInstance{ID: "db-1", Name: "db", AllocID: "a1", Port: 8080, Healthy: true})
	c.Register(ServiceInstance{ID: "db-1-sidecar-proxy", Name: "db-sidecar-proxy", Kind: KindConnectProxy, AllocID: "a1",
		Proxy: &Proxy{DestinationServiceName: "db", DestinationServiceID: "db-1"}, Healthy: true})
	if n := len(c.ConnectProxies("db")); n != 1 {
		t.Fatalf("ConnectProxies(db) = %d instances, want 1", n)
	}
	c.DeregisterAlloc("a1")
	if n := len(c.Service("db")); n != 0 {
		t.Fatalf("after DeregisterAlloc, Service(db) = %d instances, want 0", n)
	}
	if len(got) != 4 {
		t.Fatalf("got %d changes, want 4", len(got))
	}
	if !reflect.DeepEqual(got[1].Services, []string{"db-sidecar-proxy", "db"}) || !reflect.DeepEqual(got[1].ProxyIDs, []string{"db-1-sidecar-proxy"}) {
		t.Fatalf("proxy change = %+v", got[1])
	}
	for i := 1; i < len(got); i++ {
		if got[i].Index <= got[i-1].Index {
			t.Fatalf("indexes not increasing: %+v", got)
		}
	}
	cancel()
	c.Register(ServiceInstance{ID: "x", Name: "x"})
	if len(got) != 4 {
		t.Fatal("cancelled subscriber still called")
	}
	if err := c.Deregister("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Deregister(unknown) = %v, want ErrNotFound", err)
	}
}

func TestReadersGetCopies(t *testing.T) {
	c := New()
	c.Register(ServiceInstance{ID: "p", Name: "web-sidecar-proxy", Kind: KindConnectProxy, Tags: []string{"a"},
		Proxy: &Proxy{DestinationServiceName: "web", Upstreams: []Upstream{{DestinationName: "db", LocalBindPort: 9191}}}})
	got, _ := c.Get("p")
	got.Tags[0] = "mutated"
	got.Proxy.Upstreams[0].LocalBindPort = 1
	again, _ := c.Get("p")
	if again.Tags[0] != "a" || again.Proxy.Upstreams[0].LocalBindPort != 9191 {
		t.Fatalf("catalog state was mutated through a returned copy: %+v", again)
	}
	if svcs := c.Services(); !reflect.DeepEqual(svcs["web-sidecar-proxy"], []string{"a"}) {
		t.Fatalf("Services() = %v", svcs)
	}
}

func TestAllSortedCopies(t *testing.T) {
	c := New()
	if all := c.All(); len(all) != 0 {
		t.Fatalf("All() on an empty catalog = %+v", all)
	}
	c.Register(ServiceInstance{ID: "web-2", Name: "web", NodeID: "n2", Tags: []string{"v2"}, Meta: map[string]string{"k": "v"}})
	c.Register(ServiceInstance{ID: "db-1-sidecar-proxy", Name: "db-sidecar-proxy", Kind: KindConnectProxy,
		Proxy: &Proxy{DestinationServiceName: "db", Upstreams: []Upstream{{DestinationName: "cache", LocalBindPort: 9000}}}})
	c.Register(ServiceInstance{ID: "db-1", Name: "db", NodeID: "n1"})
	c.Register(ServiceInstance{ID: "web-1", Name: "web", NodeID: "n1"})
	if err := c.Deregister("web-1"); err != nil {
		t.Fatal(err)
	}
	all := c.All()
	var ids []string
	for _, inst := range all {
		ids = append(ids, inst.ID)
	}
	if want := []string{"db-1", "db-1-sidecar-proxy", "web-2"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("All() IDs = %v, want %v", ids, want)
	}
	if all[2].NodeID != "n2" || all[2].ModifyIndex != 2 || all[1].Proxy == nil || all[1].Kind != KindConnectProxy {
		t.Fatalf("All() lost fields: %+v", all)
	}
	all[2].Tags[0] = "mutated"
	all[2].Meta["k"] = "mutated"
	all[1].Proxy.Upstreams[0].LocalBindPort = 1
	again := c.All()
	if again[2].Tags[0] != "v2" || again[2].Meta["k"] != "v" || again[1].Proxy.Upstreams[0].LocalBindPort != 9000 {
		t.Fatalf("catalog state was mutated through All(): %+v", again)
	}
}

func TestByAllocSortedCopies(t *testing.T) {
	c := New()
	c.Register(ServiceInstance{ID: "b", Name: "web", AllocID: "a1", Checks: []Check{{ID: "c", Status: "passing"}}})
	c.Register(ServiceInstance{ID: "a", Name: "web", AllocID: "a1"})
	c.Register(ServiceInstance{ID: "x", Name: "db", AllocID: "a2"})
	got := c.ByAlloc("a1")
	if len(got) != 2 || got[0].ID != "a" || got[1].ID != "b" {
		t.Fatalf("ByAlloc(a1) = %+v, want a and b sorted", got)
	}
	got[1].Checks[0].Status = "critical"
	if again, _ := c.Get("b"); again.Checks[0].Status != "passing" {
		t.Fatal("catalog state was mutated through ByAlloc's result")
	}
	if n := len(c.ByAlloc("none")); n != 0 {
		t.Fatalf("ByAlloc(unknown) = %d instances", n)
	}
}
