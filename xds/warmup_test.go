package xds

import (
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/hashicorp/go-hclog"
)

// A sidecar whose delta stream comes back before the server has built its
// resources (an agent restart: the services are registered again, the
// reconciler has not run yet) claims what the previous server gave it. The
// server must not answer that with removed_resources, which made the proxy
// drop its listeners until the next push (requests failed for ~30 ms in an
// e2e run); it answers once the resources are built.
func TestReconnectBeforeBuildKeepsClaimedResources(t *testing.T) {
	e := newEnvCoalesce(t, hclog.Warn, 300*time.Millisecond)
	e.proxy("web-proxy", "web", "10.0.0.2", 21000)
	claimed := PublicListenerName(21000)
	c := e.dial("web-proxy", true)
	defer c.close()
	err := c.delta.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "web-proxy"}, TypeUrl: listenerType,
		InitialResourceVersions: map[string]string{claimed: "from-the-previous-server"}})
	if err != nil {
		t.Fatal(err)
	}
	r := c.dnext(listenerType)
	if slices.Contains(r.GetRemovedResources(), claimed) {
		t.Fatalf("the reconnecting proxy was told %s is removed before its resources were built", claimed)
	}
	var names []string
	for _, res := range r.GetResources() {
		names = append(names, res.GetName())
	}
	if !slices.Contains(names, claimed) {
		t.Fatalf("first listener response has %v, want %s", names, claimed)
	}
}

// A node that is not a registered connect proxy (a proxyless gRPC client)
// is answered at once, as before: only proxies wait for their build.
func TestUnknownNodeAnsweredAtOnce(t *testing.T) {
	e := newEnvCoalesce(t, hclog.Warn, 300*time.Millisecond)
	c := e.dial("proxyless-client", true)
	defer c.close()
	c.dreq(listenerType, nil, nil, "", "")
	// dnext fails the test if no answer comes: nothing would ever be built
	// for this node, so a parked watch would never be answered.
	if r := c.dnext(listenerType); len(r.GetRemovedResources()) != 0 || len(r.GetResources()) != 0 {
		t.Fatalf("first answer to an unknown node: %d resources, removed %v; want an empty answer", len(r.GetResources()), r.GetRemovedResources())
	}
}

// A registered proxy whose resources are built but hold no listener (a
// terminating gateway before its config entry exists, a mesh gateway with
// nothing to route) is answered once built, with what it has: its watches
// must not wait for a listener that will never come.
func TestBuiltProxyWithoutListenersAnswered(t *testing.T) {
	e := newEnvCoalesce(t, hclog.Warn, 50*time.Millisecond)
	e.cat.Register(testTerminating(23000))
	for _, isDelta := range []bool{true, false} {
		c := e.dial("tgw-1", isDelta)
		if isDelta {
			c.dreq(listenerType, nil, nil, "", "")
			if r := c.dnext(listenerType); len(r.GetResources()) != 0 {
				t.Errorf("delta: %d listeners for a gateway with no entry, want none", len(r.GetResources()))
			}
		} else {
			c.req(listenerType, nil, "", "", "")
			if r := c.next(listenerType); len(r.GetResources()) != 0 {
				t.Errorf("sotw: %d listeners for a gateway with no entry, want none", len(r.GetResources()))
			}
		}
		c.close()
	}
}
