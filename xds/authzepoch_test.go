package xds

import (
	"sync"
	"testing"

	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/authz"
	"github.com/meshlet/meshlet/catalog"
)

// fakeEpochs is an EpochSource the test moves by hand.
type fakeEpochs struct {
	mu    sync.Mutex
	epoch string
	subs  []func(string)
}

func (f *fakeEpochs) SubscribeEpoch(fn func(string)) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs = append(f.subs, fn)
	fn(f.epoch)
	return func() {}
}

func (f *fakeEpochs) move(e string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch = e
	for _, fn := range f.subs {
		fn(e)
	}
}

// TestAuthzEpochPublished: a proxy subscribed to the epoch resource gets
// the current epoch, then each new one (delta and state of the world).
func TestAuthzEpochPublished(t *testing.T) {
	src := &fakeEpochs{epoch: "boot-1"}
	e := newEnvConfig(t, hclog.Warn, 0, func(c *Config) { c.AuthzEpoch = src })
	e.proxy(webProxy, "web", "10.1.0.1", 21000, catalog.Upstream{DestinationName: "db", LocalBindPort: 9191})
	e.waitProxy(webProxy, 21000)
	epochOf := func(m map[string]any) string {
		t.Helper()
		rt, ok := m[authz.EpochResource].(*runtimev3.Runtime)
		if !ok {
			t.Fatalf("no %s in %v", authz.EpochResource, m)
		}
		return rt.GetLayer().GetFields()[authz.EpochKey].GetStringValue()
	}

	d := e.dial(webProxy, true)
	d.dreq(resource.RuntimeType, []string{authz.EpochResource}, nil, "", "")
	first := d.dnext(resource.RuntimeType)
	if got := epochOf(asAny(decode(t, first))); got != "boot-1" {
		t.Fatalf("delta: first epoch %q, want boot-1", got)
	}
	d.ack(first)

	s := e.dial(webProxy, false)
	s.req(resource.RuntimeType, []string{authz.EpochResource}, "", "", "")
	sFirst := s.next(resource.RuntimeType)
	if got := epochOf(asAny(decode(t, sFirst))); got != "boot-1" {
		t.Fatalf("sotw: first epoch %q, want boot-1", got)
	}
	s.ack(sFirst)

	src.move("boot-2")
	if got := epochOf(asAny(decode(t, d.dnext(resource.RuntimeType)))); got != "boot-2" {
		t.Fatalf("delta: epoch after a move %q, want boot-2", got)
	}
	if got := epochOf(asAny(decode(t, s.next(resource.RuntimeType)))); got != "boot-2" {
		t.Fatalf("sotw: epoch after a move %q, want boot-2", got)
	}
}
