package sidecar

import (
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"
)

// sniListener is a terminating gateway's listener: one TLS chain per name.
func sniListener(t *testing.T, names ...string) *listenerv3.Listener {
	t.Helper()
	l := publicListener(t, 23000, "leaf:"+names[0], "roots", tcpProxyFilter(t, "x", names[0]))
	l.FilterChains = nil
	for _, n := range names {
		fc := publicListener(t, 23000, "leaf:"+n, "roots", tcpProxyFilter(t, "x", n)).FilterChains[0]
		fc.FilterChainMatch = &listenerv3.FilterChainMatch{ServerNames: []string{n}}
		l.FilterChains = append(l.FilterChains, fc)
	}
	return l
}

func TestDecodeServerNameChains(t *testing.T) {
	cfg, err := decodeListener(sniListener(t, "a.default.dc1.internal.td", "B.default.dc1.internal.td"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.chain != nil || len(cfg.byServerName) != 2 {
		t.Fatalf("config = %+v", cfg)
	}
	b := cfg.byServerName["b.default.dc1.internal.td"]
	if b == nil || b.tls.cert.sds != "leaf:B.default.dc1.internal.td" || b.tcp.clusters[0].name != "B.default.dc1.internal.td" {
		t.Fatalf("chain of b = %+v", b)
	}
	if got := len(cfg.secretNames()); got != 4 {
		t.Errorf("secret names = %v", cfg.secretNames())
	}
	if got := len(cfg.clusterNames()); got != 2 {
		t.Errorf("cluster names = %v", cfg.clusterNames())
	}
}

func TestDecodeServerNameChainErrors(t *testing.T) {
	dup := sniListener(t, "a", "a")
	wildcard := sniListener(t, "*.a")
	plain := sniListener(t, "a")
	plain.FilterChains[0].TransportSocket = nil
	mixed := sniListener(t, "a", "b")
	mixed.FilterChains[1].FilterChainMatch = &listenerv3.FilterChainMatch{ServerNames: []string{"b"}, TransportProtocol: "tls"}
	withDefault := sniListener(t, "a")
	withDefault.DefaultFilterChain = proto.Clone(withDefault.FilterChains[0]).(*listenerv3.FilterChain)
	for _, tc := range []struct {
		name string
		l    *listenerv3.Listener
		want string
	}{
		{"duplicate", dup, `server name "a" is matched twice`},
		{"wildcard", wildcard, "wildcard server name"},
		{"plaintext with ext_authz", plain, "tcp_proxy alone"},
		{"other match fields", mixed, "only server_names matches"},
		{"default chain", withDefault, "default_filter_chain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeListener(tc.l); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
