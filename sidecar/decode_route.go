package sidecar

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// defaultRouteTimeout is Envoy's default route timeout.
const defaultRouteTimeout = 15 * time.Second

// routeConfig is a decoded RouteConfiguration.
type routeConfig struct {
	name   string
	vhosts []*virtualHost
}

type virtualHost struct {
	name    string
	domains []string
	routes  []*route
}

// pathKind is how a route matches the request path.
type pathKind int

const (
	pathPrefix pathKind = iota
	pathExact
	pathRegex
	pathSeparatedPrefix
)

type route struct {
	kind          pathKind
	path          string
	re            *regexp.Regexp
	caseSensitive bool
	headers       []headerMatcher
	query         []queryMatcher
	clusters      []weightedCluster
	prefixRewrite string
	timeout       time.Duration // 0: none
	retry         *retryPolicy  // nil: no retries
	hash          []hashPolicy
	upgrades      upgradeRules // route-level upgrade_configs
	// Header mutations of the route, then its virtual host, then the
	// route configuration (Envoy's default order).
	reqHeaders, respHeaders headerMutation
}

// headerMatcher is a decoded HeaderMatcher. name is lower case; pseudo
// headers (":method", ":path", ":authority", ":scheme") are matched
// against the request line.
type headerMatcher struct {
	name    string
	present *bool
	m       *stringMatcher
	invert  bool
}

func (rc *routeConfig) clusterNames() []string {
	var out []string
	for _, vh := range rc.vhosts {
		for _, r := range vh.routes {
			for _, c := range r.clusters {
				out = append(out, c.name)
			}
		}
	}
	return out
}

func decodeRouteConfig(rc *routev3.RouteConfiguration) (*routeConfig, error) {
	out := &routeConfig{name: rc.GetName()}
	rcReq, err := decodeHeaderMutation(rc.GetRequestHeadersToAdd(), rc.GetRequestHeadersToRemove())
	if err != nil {
		return nil, fmt.Errorf("request headers: %w", err)
	}
	rcResp, err := decodeHeaderMutation(rc.GetResponseHeadersToAdd(), rc.GetResponseHeadersToRemove())
	if err != nil {
		return nil, fmt.Errorf("response headers: %w", err)
	}
	for i, vh := range rc.GetVirtualHosts() {
		v, err := decodeVirtualHost(vh, rcReq, rcResp)
		if err != nil {
			return nil, fmt.Errorf("virtual_hosts[%d] %q: %w", i, vh.GetName(), err)
		}
		out.vhosts = append(out.vhosts, v)
	}
	return out, nil
}

// decodeVirtualHost decodes a virtual host's routes; the virtual host's
// and the route configuration's header mutations and the virtual host's
// retry policy are folded into each route.
func decodeVirtualHost(vh *routev3.VirtualHost, rcReq, rcResp headerMutation) (*virtualHost, error) {
	if len(vh.GetDomains()) == 0 {
		return nil, errors.New("domains is empty")
	}
	vReq, err := decodeHeaderMutation(vh.GetRequestHeadersToAdd(), vh.GetRequestHeadersToRemove())
	if err != nil {
		return nil, fmt.Errorf("request headers: %w", err)
	}
	vResp, err := decodeHeaderMutation(vh.GetResponseHeadersToAdd(), vh.GetResponseHeadersToRemove())
	if err != nil {
		return nil, fmt.Errorf("response headers: %w", err)
	}
	vRetry, err := decodeRetryPolicy(vh.GetRetryPolicy())
	if err != nil {
		return nil, err
	}
	v := &virtualHost{name: vh.GetName(), domains: vh.GetDomains()}
	for j, r := range vh.GetRoutes() {
		dr, err := decodeRoute(r)
		if err != nil {
			return nil, fmt.Errorf("routes[%d]: %w", j, err)
		}
		if dr.retry == nil {
			dr.retry = vRetry
		}
		dr.reqHeaders = dr.reqHeaders.then(vReq).then(rcReq)
		dr.respHeaders = dr.respHeaders.then(vResp).then(rcResp)
		v.routes = append(v.routes, dr)
	}
	return v, nil
}

func decodeRoute(r *routev3.Route) (*route, error) {
	ra, ok := r.GetAction().(*routev3.Route_Route)
	if !ok {
		return nil, fmt.Errorf("action %T is not supported (only route)", r.GetAction())
	}
	out := &route{caseSensitive: true, timeout: defaultRouteTimeout}
	m := r.GetMatch()
	if cs := m.GetCaseSensitive(); cs != nil {
		out.caseSensitive = cs.GetValue()
	}
	switch p := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		out.kind, out.path = pathPrefix, p.Prefix
	case *routev3.RouteMatch_Path:
		out.kind, out.path = pathExact, p.Path
	case *routev3.RouteMatch_PathSeparatedPrefix:
		out.kind, out.path = pathSeparatedPrefix, p.PathSeparatedPrefix
	case *routev3.RouteMatch_SafeRegex:
		re, err := compileRegex(p.SafeRegex.GetRegex())
		if err != nil {
			return nil, err
		}
		out.kind, out.re = pathRegex, re
	default:
		return nil, fmt.Errorf("path match %T is not supported", p)
	}
	if m.GetGrpc() != nil || m.GetRuntimeFraction() != nil {
		return nil, errors.New("grpc and runtime_fraction matches are not supported")
	}
	var err error
	if out.query, err = decodeQueryMatchers(m.GetQueryParameters()); err != nil {
		return nil, err
	}
	for i, h := range m.GetHeaders() {
		hm, err := decodeHeaderMatcher(h)
		if err != nil {
			return nil, fmt.Errorf("headers[%d]: %w", i, err)
		}
		out.headers = append(out.headers, hm)
	}
	if out.reqHeaders, err = decodeHeaderMutation(r.GetRequestHeadersToAdd(), r.GetRequestHeadersToRemove()); err != nil {
		return nil, fmt.Errorf("request headers: %w", err)
	}
	if out.respHeaders, err = decodeHeaderMutation(r.GetResponseHeadersToAdd(), r.GetResponseHeadersToRemove()); err != nil {
		return nil, fmt.Errorf("response headers: %w", err)
	}
	action := ra.Route
	if out.retry, err = decodeRetryPolicy(action.GetRetryPolicy()); err != nil {
		return nil, err
	}
	if out.hash, err = decodeHashPolicies(action.GetHashPolicy()); err != nil {
		return nil, err
	}
	if out.clusters, err = decodeClusterSpecifier(action); err != nil {
		return nil, err
	}
	if out.upgrades, err = decodeRouteUpgrades(action.GetUpgradeConfigs()); err != nil {
		return nil, err
	}
	out.prefixRewrite = action.GetPrefixRewrite()
	if t := action.GetTimeout(); t != nil {
		if err := t.CheckValid(); err != nil || t.AsDuration() < 0 {
			return nil, errors.New("route.timeout is invalid")
		}
		out.timeout = t.AsDuration()
	}
	return out, nil
}

func decodeHeaderMatcher(h *routev3.HeaderMatcher) (headerMatcher, error) {
	out := headerMatcher{name: strings.ToLower(h.GetName()), invert: h.GetInvertMatch()}
	if h.GetName() == "" {
		return out, errors.New("header name is empty")
	}
	var sm stringMatcher
	switch s := h.GetHeaderMatchSpecifier().(type) {
	case nil:
		t := true
		out.present = &t
		return out, nil
	case *routev3.HeaderMatcher_PresentMatch:
		out.present = &s.PresentMatch
		return out, nil
	case *routev3.HeaderMatcher_StringMatch:
		var err error
		if sm, err = decodeStringMatcher(s.StringMatch); err != nil {
			return out, err
		}
	default:
		return out, fmt.Errorf("header match %T is not supported (use string_match or present_match)", s)
	}
	out.m = &sm
	return out, nil
}

// reqView is what route matching reads from a request.
type reqView struct {
	req    *http.Request
	scheme string
}

// header returns a header's values joined by "," (pseudo headers from the
// request line) and whether it is present.
func (v *reqView) header(name string) (string, bool) {
	switch name {
	case ":method":
		return v.req.Method, true
	case ":path":
		return v.req.URL.RequestURI(), true
	case ":authority", "host":
		return v.req.Host, v.req.Host != ""
	case ":scheme":
		return v.scheme, true
	}
	vals, ok := v.req.Header[http.CanonicalHeaderKey(name)]
	if !ok {
		return "", false
	}
	if len(vals) == 1 {
		return vals[0], true
	}
	return strings.Join(vals, ","), true
}

// matches reports whether the request selects r: path, then headers, then
// query parameters.
func (r *route) matches(v *reqView) bool {
	path := v.req.URL.Path
	p, want := path, r.path
	if !r.caseSensitive {
		p, want = strings.ToLower(p), strings.ToLower(want)
	}
	switch r.kind {
	case pathPrefix:
		if !strings.HasPrefix(p, want) {
			return false
		}
	case pathExact:
		if p != want {
			return false
		}
	case pathSeparatedPrefix:
		if p != want && !strings.HasPrefix(p, want+"/") {
			return false
		}
	case pathRegex:
		if !r.re.MatchString(path) {
			return false
		}
	}
	for _, hm := range r.headers {
		if !hm.matches(v) {
			return false
		}
	}
	for _, qm := range r.query {
		val, ok := queryValue(v.req.URL.RawQuery, qm.name)
		if !ok || (qm.m != nil && !qm.m.match(val)) {
			return false
		}
	}
	return true
}

// queryValue returns the first value of a query parameter (decoded) and
// whether it is present, without building the whole url.Values.
func queryValue(raw, name string) (string, bool) {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(pair, "=")
		if strings.ContainsAny(k, "%+") {
			var err error
			if k, err = url.QueryUnescape(k); err != nil {
				continue
			}
		}
		if k != name {
			continue
		}
		if strings.ContainsAny(v, "%+") {
			dv, err := url.QueryUnescape(v)
			if err != nil {
				continue
			}
			v = dv
		}
		return v, true
	}
	return "", false
}

func (hm headerMatcher) matches(v *reqView) bool {
	val, ok := v.header(hm.name)
	var res bool
	switch {
	case hm.present != nil:
		res = ok == *hm.present
	case !ok:
		return false // a missing header never matches a value matcher
	default:
		res = hm.m.match(val)
	}
	return res != hm.invert
}

// selectVirtualHost picks the virtual host for a Host header: an exact
// domain (as given, then without the port), then the longest "*.suffix",
// the longest "prefix*", then "*", matched without the port.
func (rc *routeConfig) selectVirtualHost(host string) *virtualHost {
	host = strings.ToLower(host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		if vh := rc.matchDomain(host, true); vh != nil {
			return vh
		}
		host = h
	}
	return rc.matchDomain(host, false)
}

func (rc *routeConfig) matchDomain(host string, exactOnly bool) *virtualHost {
	var best *virtualHost
	bestRank, bestLen := 0, -1
	for _, vh := range rc.vhosts {
		for _, d := range vh.domains {
			d = strings.ToLower(d)
			rank, n := 0, len(d)
			switch {
			case d == host:
				return vh
			case exactOnly:
				continue
			case d == "*":
				rank = 1
			case strings.HasPrefix(d, "*") && strings.HasSuffix(host, d[1:]) && len(host) > len(d)-1:
				rank = 3
			case strings.HasSuffix(d, "*") && strings.HasPrefix(host, d[:len(d)-1]) && len(host) > len(d)-1:
				rank = 2
			default:
				continue
			}
			if rank > bestRank || (rank == bestRank && n > bestLen) {
				best, bestRank, bestLen = vh, rank, n
			}
		}
	}
	return best
}

// decodeClusterSpecifier decodes a route action's cluster or weighted
// clusters (weight-0 clusters are dropped).
func decodeClusterSpecifier(action *routev3.RouteAction) ([]weightedCluster, error) {
	var out []weightedCluster
	switch cs := action.GetClusterSpecifier().(type) {
	case *routev3.RouteAction_Cluster:
		if cs.Cluster == "" {
			return nil, errors.New("route.cluster is empty")
		}
		out = []weightedCluster{{name: cs.Cluster, weight: 1}}
	case *routev3.RouteAction_WeightedClusters:
		for _, c := range cs.WeightedClusters.GetClusters() {
			if c.GetName() == "" {
				return nil, errors.New("weighted cluster has no name")
			}
			if w := c.GetWeight().GetValue(); w > 0 {
				wc := weightedCluster{name: c.GetName(), weight: w}
				hdrs, err := decodeClusterHeaders(c)
				if err != nil {
					return nil, fmt.Errorf("weighted cluster %q: %w", c.GetName(), err)
				}
				wc.hdrs = hdrs
				out = append(out, wc)
			}
		}
		if len(out) == 0 {
			return nil, errors.New("weighted_clusters has no cluster with a positive weight")
		}
	default:
		return nil, fmt.Errorf("cluster specifier %T is not supported", cs)
	}
	return out, nil
}
