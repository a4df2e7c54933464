package xds

import (
	"fmt"
	"math"
	"sort"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	consul "github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshlet/meshlet/configentry"
)

// totalWeight is what weighted clusters' integer weights sum to: a
// split's percentage times 100, as Consul sends them.
const totalWeight = 10000

// routeConfig translates a chain's routes into the RouteConfiguration
// named name (one virtual host of the same name, any domain). clusterOf
// names the cluster of a target ID.
func routeConfig(name string, chain *configentry.Chain, clusterOf func(targetID string) (string, error)) (*route.RouteConfiguration, error) {
	if len(chain.Routes) == 0 {
		return nil, fmt.Errorf("%w: chain of %q has no routes", ErrInvalidChain, chain.Service)
	}
	vh := &route.VirtualHost{Name: name, Domains: []string{"*"}}
	for i, r := range chain.Routes {
		er, err := chainRoute(chain, r, clusterOf)
		if err != nil {
			return nil, fmt.Errorf("route %d of %q: %w", i, chain.Service, err)
		}
		vh.Routes = append(vh.Routes, er)
	}
	return &route.RouteConfiguration{Name: name, VirtualHosts: []*route.VirtualHost{vh}}, nil
}

func chainRoute(chain *configentry.Chain, r *configentry.Route, clusterOf func(string) (string, error)) (*route.Route, error) {
	if len(r.Splits) == 0 {
		return nil, fmt.Errorf("%w: route has no destination", ErrInvalidChain)
	}
	action := &route.RouteAction{PrefixRewrite: r.PrefixRewrite}
	// A lone split changing headers stays a weighted cluster (of one), as
	// Consul makes every splitter's: its header changes live there.
	if s := r.Splits[0]; len(r.Splits) == 1 && s.RequestHeaders == nil && s.ResponseHeaders == nil {
		c, err := clusterOf(r.Splits[0].TargetID)
		if err != nil {
			return nil, err
		}
		action.ClusterSpecifier = &route.RouteAction_Cluster{Cluster: c}
	} else {
		wc, err := weightedClusters(r.Splits, clusterOf)
		if err != nil {
			return nil, err
		}
		action.ClusterSpecifier = &route.RouteAction_WeightedClusters{WeightedClusters: wc}
	}
	if r.RequestTimeout > 0 {
		action.Timeout = durationpb.New(r.RequestTimeout)
	}
	if r.IdleTimeout > 0 {
		action.IdleTimeout = durationpb.New(r.IdleTimeout)
	}
	action.RetryPolicy = retryPolicy(r)
	if t := chain.Targets[r.Splits[0].TargetID]; t != nil {
		action.HashPolicy = hashPolicies(t.LoadBalancer)
	}
	out := &route.Route{
		Match:  routeMatch(r.Match),
		Action: &route.Route_Route{Route: action},
	}
	out.RequestHeadersToAdd, out.RequestHeadersToRemove = headerMods(r.RequestHeaders)
	out.ResponseHeadersToAdd, out.ResponseHeadersToRemove = headerMods(r.ResponseHeaders)
	return out, nil
}

// weightedClusters turns percentages into integer weights out of 10000.
// Rounding leftovers (a few units at most) go to the splits that rounding
// shortchanged most, so the sum is exact. A split below 0.005 % (nested
// splits multiply) rounds to nothing and is left out.
func weightedClusters(splits []configentry.Split, clusterOf func(string) (string, error)) (*route.WeightedCluster, error) {
	wc := &route.WeightedCluster{}
	exact := make([]float64, len(splits))
	weights := make([]int, len(splits))
	sum := 0
	for i, s := range splits {
		if !(s.Weight > 0) {
			return nil, fmt.Errorf("%w: split to %q has weight %v", ErrInvalidChain, s.TargetID, s.Weight)
		}
		exact[i] = float64(s.Weight) * 100
		weights[i] = int(math.Round(exact[i]))
		sum += weights[i]
	}
	d := totalWeight - sum
	if d > len(splits) || d < -len(splits) {
		return nil, fmt.Errorf("%w: split weights sum to %v%%, not 100%%", ErrInvalidChain, float64(sum)/100)
	}
	for ; d != 0; d -= sign(d) {
		best := -1
		for i := range weights {
			gap := (exact[i] - float64(weights[i])) * float64(sign(d))
			if (d > 0 || weights[i] > 1) && (best < 0 || gap > (exact[best]-float64(weights[best]))*float64(sign(d))) {
				best = i
			}
		}
		weights[best] += sign(d)
	}
	for i, s := range splits {
		if weights[i] == 0 {
			continue
		}
		c, err := clusterOf(s.TargetID)
		if err != nil {
			return nil, err
		}
		cw := &route.WeightedCluster_ClusterWeight{Name: c, Weight: wrapperspb.UInt32(uint32(weights[i]))}
		cw.RequestHeadersToAdd, cw.RequestHeadersToRemove = headerMods(s.RequestHeaders)
		cw.ResponseHeadersToAdd, cw.ResponseHeadersToRemove = headerMods(s.ResponseHeaders)
		wc.Clusters = append(wc.Clusters, cw)
	}
	return wc, nil
}

func sign(n int) int {
	if n < 0 {
		return -1
	}
	return 1
}

// routeMatch: nil (the catch-all) and a match without a path match every
// path ("/" prefix).
func routeMatch(m *consul.ServiceRouteHTTPMatch) *route.RouteMatch {
	rm := &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}}
	if m == nil {
		return rm
	}
	switch {
	case m.PathExact != "":
		rm.PathSpecifier = &route.RouteMatch_Path{Path: m.PathExact}
	case m.PathPrefix != "":
		rm.PathSpecifier = &route.RouteMatch_Prefix{Prefix: m.PathPrefix}
	case m.PathRegex != "":
		rm.PathSpecifier = &route.RouteMatch_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: m.PathRegex}}
	}
	if m.CaseInsensitive {
		rm.CaseSensitive = wrapperspb.Bool(false)
	}
	for _, h := range m.Header {
		rm.Headers = append(rm.Headers, headerMatcher(h))
	}
	if len(m.Methods) > 0 {
		rm.Headers = append(rm.Headers, &route.HeaderMatcher{
			Name: ":method",
			HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: &matcher.StringMatcher{
				MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: strings.Join(m.Methods, "|")}},
			}},
		})
	}
	for _, q := range m.QueryParam {
		qm := &route.QueryParameterMatcher{Name: q.Name}
		switch {
		case q.Present:
			qm.QueryParameterMatchSpecifier = &route.QueryParameterMatcher_PresentMatch{PresentMatch: true}
		case q.Regex != "":
			qm.QueryParameterMatchSpecifier = &route.QueryParameterMatcher_StringMatch{StringMatch: &matcher.StringMatcher{
				MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: q.Regex}},
			}}
		default:
			qm.QueryParameterMatchSpecifier = &route.QueryParameterMatcher_StringMatch{StringMatch: &matcher.StringMatcher{
				MatchPattern: &matcher.StringMatcher_Exact{Exact: q.Exact},
			}}
		}
		rm.QueryParameters = append(rm.QueryParameters, qm)
	}
	return rm
}

func headerMatcher(h consul.ServiceRouteHTTPMatchHeader) *route.HeaderMatcher {
	hm := &route.HeaderMatcher{Name: h.Name, InvertMatch: h.Invert}
	var sm *matcher.StringMatcher
	switch {
	case h.Present:
		hm.HeaderMatchSpecifier = &route.HeaderMatcher_PresentMatch{PresentMatch: true}
		return hm
	case h.Prefix != "":
		sm = &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: h.Prefix}}
	case h.Suffix != "":
		sm = &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Suffix{Suffix: h.Suffix}}
	case h.Regex != "":
		sm = &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: h.Regex}}}
	default:
		sm = &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: h.Exact}}
	}
	hm.HeaderMatchSpecifier = &route.HeaderMatcher_StringMatch{StringMatch: sm}
	return hm
}

// retryPolicy is nil when the route asks for no retries. Conditions are
// Envoy's x-envoy-retry-on names, connect-failure first, each once.
func retryPolicy(r *configentry.Route) *route.RetryPolicy {
	var on []string
	seen := map[string]bool{}
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			on = append(on, s)
		}
	}
	if r.RetryOnConnectFailure {
		add("connect-failure")
	}
	for _, s := range r.RetryOn {
		add(s)
	}
	if len(r.RetryOnStatusCodes) > 0 {
		add("retriable-status-codes")
	}
	if len(on) == 0 && r.NumRetries == 0 {
		return nil
	}
	rp := &route.RetryPolicy{RetryOn: strings.Join(on, ","), RetriableStatusCodes: append([]uint32(nil), r.RetryOnStatusCodes...)}
	if r.NumRetries > 0 {
		rp.NumRetries = wrapperspb.UInt32(r.NumRetries)
	}
	return rp
}

// hashPolicies are the route's hash policies for a ring_hash or maglev
// target (other policies ignore them).
func hashPolicies(lb *consul.LoadBalancer) []*route.RouteAction_HashPolicy {
	if lb == nil || (lb.Policy != "ring_hash" && lb.Policy != "maglev") {
		return nil
	}
	var out []*route.RouteAction_HashPolicy
	for _, h := range lb.HashPolicies {
		hp := &route.RouteAction_HashPolicy{Terminal: h.Terminal}
		switch {
		case h.SourceIP:
			hp.PolicySpecifier = &route.RouteAction_HashPolicy_ConnectionProperties_{
				ConnectionProperties: &route.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true}}
		case h.Field == "header":
			hp.PolicySpecifier = &route.RouteAction_HashPolicy_Header_{Header: &route.RouteAction_HashPolicy_Header{HeaderName: h.FieldValue}}
		case h.Field == "query_parameter":
			hp.PolicySpecifier = &route.RouteAction_HashPolicy_QueryParameter_{QueryParameter: &route.RouteAction_HashPolicy_QueryParameter{Name: h.FieldValue}}
		case h.Field == "cookie":
			c := &route.RouteAction_HashPolicy_Cookie{Name: h.FieldValue}
			if cc := h.CookieConfig; cc != nil {
				c.Path = cc.Path
				if cc.Session {
					c.Ttl = durationpb.New(0)
				} else if cc.TTL > 0 {
					c.Ttl = durationpb.New(cc.TTL)
				}
			}
			hp.PolicySpecifier = &route.RouteAction_HashPolicy_Cookie_{Cookie: c}
		default:
			continue
		}
		out = append(out, hp)
	}
	return out
}

// headerMods: Add appends, Set overwrites; names sorted for stable output.
func headerMods(m *consul.HTTPHeaderModifiers) ([]*core.HeaderValueOption, []string) {
	if m == nil {
		return nil, nil
	}
	var add []*core.HeaderValueOption
	put := func(kv map[string]string, action core.HeaderValueOption_HeaderAppendAction) {
		names := make([]string, 0, len(kv))
		for k := range kv {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			add = append(add, &core.HeaderValueOption{Header: &core.HeaderValue{Key: k, Value: kv[k]}, AppendAction: action})
		}
	}
	put(m.Add, core.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD)
	put(m.Set, core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)
	return add, append([]string(nil), m.Remove...)
}
