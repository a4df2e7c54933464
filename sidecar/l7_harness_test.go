package sidecar

import (
	"cmp"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httpauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshlet/meshlet/internal/testutil"
)

// l7Backend is one instance of the "api" service: an HTTP app behind its
// own sidecar (mTLS public listener, network ext_authz, HTTP connection
// manager, optionally the HTTP ext_authz filter).
type l7Backend struct {
	cluster string // the subset cluster it belongs to in web's config
	nodeID  string
	port    int
	app     *httptest.Server
	appAddr string
	proxy   *Proxy
}

// l7Mesh is web (upstream listener "api" over RDS, one EDS cluster per
// subset, upstream mTLS) -> api backends, all on one go-control-plane ADS
// server with real TLS between the sidecars.
type l7Mesh struct {
	t        testing.TB
	cp       *controlPlane
	ca       *testCA
	webPort  int
	web      *Proxy
	backends []*l7Backend
	webLeaf  *testLeaf
	withheld map[string]bool // clusters left out of web's config for now
	h2       bool
	// webStat is the stat prefix of web's upstream listener ("" =
	// "upstream.api"); changing it replaces the listener (LDS update).
	webStat string
}

type l7BackendSpec struct {
	cluster string
	handler http.Handler
	addr    string // an app already listening (handler unused)
}

type l7Options struct {
	httpAuthz bool     // api's public listener runs the HTTP ext_authz filter
	withhold  []string // clusters web does not get until withheld is cleared
	h2        bool     // every cluster speaks HTTP/2 (h2c to the apps, h2 over mTLS between sidecars)
	normalize bool     // api's public listener normalizes paths and merges slashes (as meshlet's xDS)
}

// subsetCluster is the name of a subset's cluster ("" = the service's).
func subsetCluster(subset string) string {
	if subset == "" {
		return sniFor("api")
	}
	return subset + "." + sniFor("api")
}

func newL7Mesh(t testing.TB, specs []l7BackendSpec, rc *routev3.RouteConfiguration, opts l7Options) *l7Mesh {
	t.Helper()
	m := &l7Mesh{t: t, cp: newControlPlane(t), ca: newTestCA(t, "root-1"), webPort: freePort(t), withheld: map[string]bool{}, h2: opts.h2}
	for _, c := range opts.withhold {
		m.withheld[c] = true
	}
	m.webLeaf = m.ca.leaf(t, spiffeID("web"))
	for i, s := range specs {
		b := &l7Backend{cluster: s.cluster, nodeID: fmt.Sprintf("api-sidecar-proxy-%d", i), port: freePort(t), appAddr: s.addr}
		if s.addr == "" {
			b.app = httptest.NewServer(s.handler)
			b.appAddr = b.app.Listener.Addr().String()
			t.Cleanup(b.app.Close)
		}
		m.cp.set(b.nodeID, m.backendResources(b, opts))
		m.backends = append(m.backends, b)
	}
	m.setWeb(rc, nil)
	m.web = startProxy(t, "web-sidecar-proxy", "web", m.cp.tcpAddr, true)
	for _, b := range m.backends {
		b.proxy = startProxy(t, b.nodeID, "api", m.cp.unixAddr(), false)
	}
	testutil.WaitFor(t, waitTimeout, "web ready", m.web.Ready)
	for _, b := range m.backends {
		testutil.WaitFor(t, waitTimeout, b.nodeID+" ready", b.proxy.Ready)
		testutil.WaitFor(t, waitTimeout, b.nodeID+" listening", func() bool {
			c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", b.port), time.Second)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}
	return m
}

func httpAuthzFilter(t testing.TB) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: "envoy.filters.http.ext_authz", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustPack(t, &httpauthzv3.ExtAuthz{
		Services: &httpauthzv3.ExtAuthz_GrpcService{GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "local_agent"}},
		}},
		TransportApiVersion:    corev3.ApiVersion_V3,
		IncludePeerCertificate: true,
		FailureModeAllow:       false,
	})}}
}

func (m *l7Mesh) backendResources(b *l7Backend, opts l7Options) map[string][]types.Resource {
	hcm := hcmFilter(m.t, "public_listener", routeToCluster("local_app", "local_app"), "")
	if opts.httpAuthz || opts.normalize {
		var h hcmv3.HttpConnectionManager
		if err := hcm.GetTypedConfig().UnmarshalTo(&h); err != nil {
			m.t.Fatalf("unpack hcm: %v", err)
		}
		if opts.httpAuthz {
			h.HttpFilters = append([]*hcmv3.HttpFilter{httpAuthzFilter(m.t)}, h.HttpFilters...)
		}
		if opts.normalize {
			h.NormalizePath, h.MergeSlashes = wrapperspb.Bool(true), true
		}
		hcm = &listenerv3.Filter{Name: hcm.Name, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustPack(m.t, &h)}}
	}
	app := localAppCluster(b.appAddr)
	if opts.h2 {
		withH2(m.t, app)
	}
	return map[string][]types.Resource{
		typeListener: {publicListener(m.t, b.port, "leaf", "roots", hcm)},
		typeCluster:  {app},
		typeSecret:   {certSecret("leaf", m.ca.leaf(m.t, spiffeID("api"))), rootsSecret("roots", m.ca)},
	}
}

// setWeb publishes web's snapshot: the route config and one cluster per
// subset named by the backends (plus extra clusters), and returns its
// version.
func (m *l7Mesh) setWeb(rc *routev3.RouteConfiguration, mod func(*clusterv3.Cluster)) string {
	m.t.Helper()
	addrs := map[string][]string{}
	for _, b := range m.backends {
		if m.withheld[b.cluster] {
			continue
		}
		addrs[b.cluster] = append(addrs[b.cluster], fmt.Sprintf("127.0.0.1:%d", b.port))
	}
	names := make([]string, 0, len(addrs))
	for n := range addrs {
		names = append(names, n)
	}
	sort.Strings(names)
	res := map[string][]types.Resource{
		typeListener: {upstreamListener("api", m.webPort, hcmFilter(m.t, cmp.Or(m.webStat, "upstream.api"), nil, "api"))},
		typeRoute:    {rc},
		typeSecret:   {certSecret("leaf", m.webLeaf), rootsSecret("roots", m.ca)},
	}
	for _, n := range names {
		c := upstreamCluster(m.t, "api", "leaf", "roots")
		c.Name = n
		if m.h2 {
			withH2(m.t, c)
		}
		if mod != nil {
			mod(c)
		}
		res[typeCluster] = append(res[typeCluster], c)
		res[typeEndpoint] = append(res[typeEndpoint], cla(n, addrs[n]...))
	}
	return m.cp.set(m.web.nodeIDOr("web-sidecar-proxy"), res)
}

// nodeIDOr returns p's node ID, or id before p exists.
func (p *Proxy) nodeIDOr(id string) string {
	if p == nil {
		return id
	}
	return p.cfg.ProxyID
}

func (m *l7Mesh) url(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", m.webPort, path)
}

// get sends one request through web and returns the status and body.
func (m *l7Mesh) get(client *http.Client, path string, hdr ...string) (int, string, http.Header, error) {
	req, err := http.NewRequest(http.MethodGet, m.url(path), nil)
	if err != nil {
		return 0, "", nil, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header, err
}

// apiRoutes is web's route configuration "api" with the given routes.
func apiRoutes(routes ...*routev3.Route) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: "api", VirtualHosts: []*routev3.VirtualHost{{Name: "api", Domains: []string{"*"}, Routes: routes}}}
}

// splitRoute sends prefix to clusters by integer weight (name, weight...).
func splitRoute(prefix string, split ...any) *routev3.Route {
	wc := &routev3.WeightedCluster{}
	for i := 0; i+1 < len(split); i += 2 {
		wc.Clusters = append(wc.Clusters, &routev3.WeightedCluster_ClusterWeight{Name: split[i].(string), Weight: wrapperspb.UInt32(uint32(split[i+1].(int)))})
	}
	return &routev3.Route{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: prefix}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: wc}}}}
}

// clusterRoute sends prefix to one cluster; mod may add policies.
func clusterRoute(prefix, cluster string, mod func(*routev3.Route)) *routev3.Route {
	r := &routev3.Route{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: prefix}}, Action: clusterAction(cluster)}
	if mod != nil {
		mod(r)
	}
	return r
}

func durationpbNew(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func headerOpts(kv ...string) []*corev3.HeaderValueOption {
	var out []*corev3.HeaderValueOption
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: kv[i], Value: kv[i+1]}})
	}
	return out
}

// withH2 makes a cluster speak HTTP/2 to its endpoints, as the xDS server
// does for http2 and grpc services.
func withH2(t testing.TB, c *clusterv3.Cluster) {
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{typeHTTPProtocolOptions: mustPack(t, &upstreamhttpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
		}},
	})}
}
