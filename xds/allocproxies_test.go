package xds

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/catalog"
)

// A socket declares only its own allocation's proxies, and only while it
// is open: its streams wait for those proxies' resources like registered
// ones, until the socket closes.
func TestWithAllocProxies(t *testing.T) {
	e := newEnv(t, hclog.Error)
	dir := t.TempDir()
	px := func(alloc, id string, kind string) catalog.ServiceInstance {
		return catalog.ServiceInstance{ID: id, Kind: kind, AllocID: alloc, Proxy: &catalog.Proxy{DestinationServiceName: "web"}}
	}
	bad := []struct {
		name string
		inst catalog.ServiceInstance
	}{
		{"another allocation's", px("a2", "web-sidecar", catalog.KindConnectProxy)},
		{"not a proxy", px("a1", "web", catalog.KindTypical)},
		{"no ID", px("a1", "", catalog.KindConnectProxy)},
	}
	for _, b := range bad {
		if _, err := e.srv.ListenAlloc("a1", filepath.Join(dir, b.name+".sock"), WithAllocProxies([]catalog.ServiceInstance{b.inst})); !errors.Is(err, ErrInvalidAllocProxy) {
			t.Errorf("%s proxy: err = %v, want ErrInvalidAllocProxy", b.name, err)
		}
	}
	if e.srv.expectProxy("web-sidecar") {
		t.Fatal("a refused declaration is expected")
	}
	l, err := e.srv.ListenAlloc("a1", filepath.Join(dir, "a1.sock"), WithAllocProxies([]catalog.ServiceInstance{px("a1", "web-sidecar", catalog.KindConnectProxy)}))
	if err != nil {
		t.Fatal(err)
	}
	if !e.srv.expectProxy("web-sidecar") {
		t.Error("the declared proxy is not expected while its socket is open")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if e.srv.expectProxy("web-sidecar") {
		t.Error("the declared proxy is still expected after its socket closed")
	}
}
