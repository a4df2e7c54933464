package sidecar

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestDecodePublicListener(t *testing.T) {
	l := publicListener(t, 21000, "leaf", "roots", tcpProxyFilter(t, "public_listener", "local_app"))
	cfg, err := decodeListener(l)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	ch := cfg.chain
	switch {
	case cfg.addr != "127.0.0.1:21000":
		t.Errorf("addr = %q", cfg.addr)
	case ch.tls == nil || !ch.tls.requireClientCert:
		t.Errorf("tls = %+v, want a required client certificate", ch.tls)
	case ch.tls.cert.sds != "leaf" || ch.tls.validation.sds != "roots":
		t.Errorf("secret names = %q, %q", ch.tls.cert.sds, ch.tls.validation.sds)
	case ch.authz == nil || ch.authz.statPrefix != "connect_authz" || ch.authz.failureModeAllow || ch.authz.timeout != 10*time.Second:
		t.Errorf("authz = %+v", ch.authz)
	case ch.tcp == nil || ch.tcp.clusters[0].name != "local_app":
		t.Errorf("tcp = %+v", ch.tcp)
	}
	if got := strings.Join(cfg.secretNames(), ","); got != "leaf,roots" {
		t.Errorf("secretNames = %q", got)
	}
}

func TestDecodeListenerErrors(t *testing.T) {
	withFilters := func(fs ...*listenerv3.Filter) *listenerv3.Listener {
		l := upstreamListener("db", 9191, tcpProxyFilter(t, "x", "c"))
		l.FilterChains[0].Filters = fs
		return l
	}
	otherAuthz := extAuthzFilter(t)
	otherAuthz.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: mustPack(t, &extauthzv3.ExtAuthz{
		StatPrefix: "x", GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "elsewhere"}}},
	})}
	noRouter := hcmFilter(t, "h", routeToCluster("r", "c"), "")
	h := &hcmv3.HttpConnectionManager{}
	if err := noRouter.GetTypedConfig().UnmarshalTo(h); err != nil {
		t.Fatal(err)
	}
	h.HttpFilters = nil
	noRouter.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: mustPack(t, h)}
	twoChains := upstreamListener("db", 9191, tcpProxyFilter(t, "x", "c"))
	twoChains.FilterChains = append(twoChains.FilterChains, twoChains.FilterChains[0])
	badAddr := upstreamListener("db", 9191, tcpProxyFilter(t, "x", "c"))
	badAddr.Address = socketAddr("localhost", 9191)
	noPrefix := withFilters(tcpProxyFilter(t, "", "c"))
	badTLS := publicListener(t, 1, "leaf", "roots", tcpProxyFilter(t, "x", "c"))
	badTLS.FilterChains[0].TransportSocket.ConfigType = &corev3.TransportSocket_TypedConfig{TypedConfig: mustPack(t, &tlsv3.UpstreamTlsContext{})}

	cases := []struct {
		name string
		l    *listenerv3.Listener
		want string
	}{
		{"unknown filter", withFilters(bogusFilter(), tcpProxyFilter(t, "x", "c")), "meshlet.test.Bogus is not supported"},
		{"tcp_proxy not last", withFilters(tcpProxyFilter(t, "x", "c"), extAuthzFilter(t)), "tcp_proxy must be the last filter"},
		{"no terminal filter", withFilters(), "has no filters"},
		{"authz only", withFilters(extAuthzFilter(t)), "ext_authz must appear once"},
		{"authz to another cluster", withFilters(otherAuthz, tcpProxyFilter(t, "x", "c")), `cluster "elsewhere" is not supported`},
		{"hcm without router", withFilters(noRouter), "must end with the router"},
		{"two filter chains", twoChains, "exactly one filter chain"},
		{"host name address", badAddr, "not an IP address"},
		{"tcp_proxy without stat_prefix", noPrefix, "stat_prefix is required"},
		{"wrong TLS context type", badTLS, "is not supported (want"},
		{"no name", &listenerv3.Listener{}, "has no name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeListener(tc.l)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
		})
	}
}

func TestDecodeClusterErrors(t *testing.T) {
	mod := func(f func(c *clusterv3.Cluster)) *clusterv3.Cluster {
		c := upstreamCluster(t, "db", "leaf", "roots")
		f(c)
		return c
	}
	cases := []struct {
		name string
		c    *clusterv3.Cluster
		want string
	}{
		{"dns cluster", mod(func(c *clusterv3.Cluster) {
			c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS}
		}), "STRICT_DNS is not supported"},
		{"eds not over ads", mod(func(c *clusterv3.Cluster) {
			c.EdsClusterConfig.EdsConfig = &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_PathConfigSource{PathConfigSource: &corev3.PathConfigSource{Path: "/x"}}}
		}), "want ads"},
		{"cluster provided lb", mod(func(c *clusterv3.Cluster) { c.LbPolicy = clusterv3.Cluster_CLUSTER_PROVIDED }), "CLUSTER_PROVIDED is not supported"},
		{"zero connect timeout", mod(func(c *clusterv3.Cluster) { c.ConnectTimeout = durationpb.New(0) }), "connect_timeout must be positive"},
		{"static without endpoints", mod(func(c *clusterv3.Cluster) {
			c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}
		}), "load assignment is missing"},
		{"accept untrusted", mod(func(c *clusterv3.Cluster) {
			ctx := &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{
				ValidationContext: &tlsv3.CertificateValidationContext{TrustChainVerification: tlsv3.CertificateValidationContext_ACCEPT_UNTRUSTED},
			}}}
			c.TransportSocket.ConfigType = &corev3.TransportSocket_TypedConfig{TypedConfig: mustPack(t, ctx)}
		}), "ACCEPT_UNTRUSTED is not supported"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeCluster(tc.c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	cfg, err := decodeCluster(upstreamCluster(t, "db", "leaf", "roots"))
	if err != nil {
		t.Fatalf("valid cluster: %v", err)
	}
	if !cfg.eds || cfg.edsName != sniFor("db") || cfg.tls.sni != sniFor("db") || len(cfg.tls.validation.sans) != 1 || cfg.connectTimeout != 2*time.Second {
		t.Fatalf("decoded cluster = %+v", cfg)
	}
}

func TestDecodeSecret(t *testing.T) {
	ca := newTestCA(t, "root")
	leaf := ca.leaf(t, spiffeID("web"))
	other := ca.leaf(t, spiffeID("db"))
	mismatched := certSecret("leaf", leaf)
	mismatched.GetTlsCertificate().PrivateKey.Specifier = &corev3.DataSource_InlineString{InlineString: other.keyPEM}
	cases := []struct {
		name string
		s    *tlsv3.Secret
		want string // "" = valid
	}{
		{"certificate", certSecret("leaf", leaf), ""},
		{"roots", rootsSecret("roots", ca), ""},
		{"key of another certificate", mismatched, "failed to parse certificate and key"},
		{"garbage roots", &tlsv3.Secret{Name: "roots", Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "not pem"}},
		}}}, "holds no PEM certificate"},
		{"validation without roots", &tlsv3.Secret{Name: "roots", Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{}}}, "has no trusted_ca"},
		{"no type", &tlsv3.Secret{Name: "x"}, "is not supported"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := decodeSecret(tc.s)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if s.cert == nil && s.roots == nil {
					t.Fatal("decoded secret holds nothing")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestRouteMatching(t *testing.T) {
	rc, err := decodeRouteConfig(&routev3.RouteConfiguration{Name: "r", VirtualHosts: []*routev3.VirtualHost{
		{Name: "exact", Domains: []string{"api.example"}, Routes: []*routev3.Route{route3("/", "exact")}},
		{Name: "suffix", Domains: []string{"*.example"}, Routes: []*routev3.Route{
			{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: "/exact"}}, Action: clusterAction("path")},
			{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v1"}, Headers: []*routev3.HeaderMatcher{{
				Name: "x-canary", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "yes"}}},
			}}}, Action: clusterAction("canary")},
			{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "/v[0-9]+/.*"}}}, Action: clusterAction("regex")},
		}},
		{Name: "any", Domains: []string{"*"}, Routes: []*routev3.Route{route3("/", "any")}},
	}})
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	cases := []struct {
		host, path, canary, want string
	}{
		{"api.example", "/x", "", "exact"},
		{"api.example:8080", "/x", "", "exact"},
		{"db.example", "/exact", "", "path"},
		{"db.example", "/v1/items", "yes", "canary"},
		{"db.example", "/v1/items", "", "regex"},
		{"db.example", "/other", "", ""},
		{"elsewhere", "/", "", "any"},
	}
	for _, tc := range cases {
		vh := rc.selectVirtualHost(tc.host)
		h := http.Header{}
		if tc.canary != "" {
			h.Set("X-Canary", tc.canary)
		}
		got := ""
		for _, r := range vh.routes {
			if r.matches(&reqView{req: &http.Request{Method: "GET", Host: tc.host, URL: &url.URL{Path: tc.path}, Header: h}}) {
				got = r.clusters[0].name
				break
			}
		}
		if got != tc.want {
			t.Errorf("%s%s (canary %q) -> %q, want %q", tc.host, tc.path, tc.canary, got, tc.want)
		}
	}
}

func clusterAction(c string) *routev3.Route_Route {
	return &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: c}}}
}

func route3(prefix, c string) *routev3.Route {
	return &routev3.Route{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: prefix}}, Action: clusterAction(c)}
}

// A response with one invalid resource changes nothing.
func TestStorePrepareIsAllOrNothing(t *testing.T) {
	s := newStore()
	good := upstreamListener("a", 9001, tcpProxyFilter(t, "a", "c"))
	u := &update{typeURL: typeListener, version: "1", full: true, resources: []rawResource{{res: mustPack(t, good)}}}
	next, err := s.prepare(u, nil)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	s.commit(typeListener, "1", next)
	before := s.get(typeListener)["a:127.0.0.1:9001"]

	bad := upstreamListener("b", 9002, bogusFilter())
	changed := proto.Clone(good).(*listenerv3.Listener)
	changed.FilterChains[0].Filters = []*listenerv3.Filter{tcpProxyFilter(t, "a2", "c")}
	u2 := &update{typeURL: typeListener, version: "2", full: true, resources: []rawResource{{res: mustPack(t, changed)}, {res: mustPack(t, bad)}}}
	if _, err := s.prepare(u2, nil); err == nil || !strings.Contains(err.Error(), "b:127.0.0.1:9002") {
		t.Fatalf("prepare of a set with an invalid listener: %v", err)
	}
	if got := s.get(typeListener)["a:127.0.0.1:9001"]; got != before || len(s.get(typeListener)) != 1 {
		t.Fatal("a rejected update changed the store")
	}
	// An unchanged resource keeps its decoded value.
	next, err = s.prepare(&update{typeURL: typeListener, version: "3", full: true, resources: []rawResource{{res: mustPack(t, good)}}}, nil)
	if err != nil || next["a:127.0.0.1:9001"].cfg != before.cfg {
		t.Fatalf("unchanged listener was re-decoded (err %v)", err)
	}
	// A body of the wrong type is rejected.
	if _, err := s.prepare(&update{typeURL: typeListener, resources: []rawResource{{res: mustPack(t, localAppCluster("127.0.0.1:1"))}}}, nil); err == nil {
		t.Fatal("a cluster in an LDS response was accepted")
	}
	if _, err := s.prepare(&update{typeURL: "type.googleapis.com/x.Y"}, nil); err == nil {
		t.Fatal("an unknown type was accepted")
	}
}
