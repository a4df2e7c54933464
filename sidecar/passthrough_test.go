package sidecar

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshlet/meshlet/internal/testutil"
)

// gatewayListener is a mesh gateway's listener: one plain tcp_proxy chain
// per server name, to the cluster of the same name (with "*." dropped).
func gatewayListener(t testing.TB, port int, names ...string) *listenerv3.Listener {
	l := &listenerv3.Listener{
		Name:    "default:0.0.0.0:gw",
		Address: socketAddr("127.0.0.1", port),
		ListenerFilters: []*listenerv3.ListenerFilter{{
			Name: "envoy.filters.listener.tls_inspector",
		}},
	}
	for _, n := range names {
		l.FilterChains = append(l.FilterChains, &listenerv3.FilterChain{
			FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: []string{n}},
			Filters:          []*listenerv3.Filter{tcpProxyFilter(t, "mesh_gateway."+n, strings.TrimPrefix(n, "*."))},
		})
	}
	return l
}

func plainCluster(name string, addrs ...string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(5 * time.Second),
		LoadAssignment:       cla(name, addrs...),
	}
}

func TestDecodePassthroughChains(t *testing.T) {
	cfg, err := decodeListener(gatewayListener(t, 24000, "a.default.dc1.internal.td", "*.dc2.internal.td"))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.passthrough || len(cfg.byServerName) != 2 || len(cfg.secretNames()) != 0 {
		t.Fatalf("config = %+v", cfg)
	}
	if got := cfg.clusterNames(); len(got) != 2 {
		t.Errorf("cluster names = %v", got)
	}
	st := (&Proxy{stats: newStatsRegistry()}).buildListenerState(cfg)
	if st.tlsConf != nil {
		t.Error("a passthrough listener terminates TLS")
	}
	for name, want := range map[string]string{
		"a.default.dc1.internal.td":   "a.default.dc1.internal.td",
		"A.Default.DC1.internal.td":   "a.default.dc1.internal.td",
		"web.default.dc2.internal.td": "dc2.internal.td",
		"dc2.internal.td":             "",
		"b.default.dc1.internal.td":   "",
		"":                            "",
	} {
		sub := st.lookupServerName(name)
		got := ""
		if sub != nil {
			got = sub.cfg.chain.tcp.clusters[0].name
		}
		if got != want {
			t.Errorf("server name %q goes to %q, want %q", name, got, want)
		}
	}
}

func TestDecodePassthroughErrors(t *testing.T) {
	mixed := sniListener(t, "a")
	mixed.FilterChains = append(mixed.FilterChains, gatewayListener(t, 23000, "b").FilterChains[0])
	authz := gatewayListener(t, 23000, "a")
	authz.FilterChains[0].Filters = append([]*listenerv3.Filter{extAuthzFilter(t)}, authz.FilterChains[0].Filters...)
	for _, tc := range []struct {
		name string
		l    *listenerv3.Listener
		want string
	}{
		{"mixed", mixed, "all terminate TLS or all pass it through"},
		{"authz", authz, "tcp_proxy alone"},
		{"inner wildcard", gatewayListener(t, 23000, "a.*.td"), ""},
		{"bare wildcard", gatewayListener(t, 23000, "*"), `only a leading "*." wildcard`},
		{"wildcard suffix", gatewayListener(t, 23000, "*foo.td"), `only a leading "*." wildcard`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeListener(tc.l)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("error = %v", err) // an odd exact name is just a name
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// Bytes that are no TLS client hello give no server name.
func TestPeekServerNameRefusesPlaintext(t *testing.T) {
	a, b := tcpPair(t)
	go func() { _, _ = a.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) }()
	_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := peekServerName(b); !errors.Is(err, errNotClientHello) {
		t.Fatalf("error = %v, want errNotClientHello", err)
	}
}

// web's sidecar dials db through a gateway proxy that routes by SNI: the
// mTLS between web's and db's sidecars passes through untouched (db's
// sidecar verifies web's leaf, web's verifies db's), the gateway counts
// the connection, and a server name no chain matches is dropped.
func TestPassthroughGatewayMesh(t *testing.T) {
	m := newMesh(t, meshOptions{})
	gwPort := freePort(t)
	gw := startProxy(t, "mesh-gateway", "mesh-gateway", m.cp.tcpAddr, true)
	wildcard := "*." + testDC + ".internal." + testTrustDomain
	gwRes := func(names ...string) map[string][]types.Resource {
		l := gatewayListener(t, gwPort, names...)
		for i, n := range names { // every chain to db's cluster (a listener waits for its clusters)
			l.FilterChains[i].Filters = []*listenerv3.Filter{tcpProxyFilter(t, "mesh_gateway."+n, strings.TrimPrefix(wildcard, "*."))}
		}
		return map[string][]types.Resource{
			typeListener: {l},
			typeCluster:  {plainCluster(strings.TrimPrefix(wildcard, "*."), m.dbs[0].publicAddr())},
		}
	}
	m.cp.set(gw.cfg.ProxyID, gwRes(wildcard))
	testutil.WaitFor(t, waitTimeout, "gateway ready", gw.Ready)
	web := m.webResources()
	web[typeEndpoint] = []types.Resource{cla(sniFor("db"), net.JoinHostPort("127.0.0.1", strconv.Itoa(gwPort)))}
	waitAccepted(t, m.web, typeEndpoint, m.cp.set(m.web.cfg.ProxyID, web))

	c, id := m.greet(t)
	if id != "db-0" {
		t.Fatalf("greeting through the gateway = %q", id)
	}
	if got := c.exchange(t, "across"); got != "across" {
		t.Fatalf("echo through the gateway = %q", got)
	}
	prefix := "tcp.mesh_gateway." + wildcard + ".downstream_cx_total"
	if v, _ := gw.stats.value(prefix); v < 1 {
		t.Errorf("%s = %d, want the connection counted at the gateway", prefix, v)
	}
	if v, _ := m.dbs[0].proxy.stats.value("listener.127.0.0.1_" + strconv.Itoa(m.dbs[0].port) + ".ssl.handshake"); v < 1 {
		t.Errorf("db's sidecar completed no TLS handshake (%d): the gateway must not terminate", v)
	}

	waitAccepted(t, gw, typeListener, m.cp.set(gw.cfg.ProxyID, gwRes("nothing.example")))
	miss := dialLine(t, m.webAddr())
	if line, err := miss.readLine(); err == nil {
		t.Fatalf("a server name no chain matches got through: %q", line)
	}
	testutil.WaitFor(t, waitTimeout, "no_filter_chain_match counted", func() bool {
		v, _ := gw.stats.value("listener.127.0.0.1_" + strconv.Itoa(gwPort) + ".no_filter_chain_match")
		return v >= 1
	})
}
