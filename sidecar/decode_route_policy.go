package sidecar

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// retryOn is a set of Envoy x-envoy-retry-on conditions.
type retryOn uint32

const (
	retry5xx retryOn = 1 << iota
	retryGatewayError
	retryConnectFailure
	retryRetriableStatusCodes
	retryReset
	retryRefusedStream
	retry4xx
)

var retryOnNames = map[string]retryOn{
	"5xx":                        retry5xx,
	"gateway-error":              retryGatewayError,
	"connect-failure":            retryConnectFailure,
	"retriable-status-codes":     retryRetriableStatusCodes,
	"reset":                      retryReset,
	"refused-stream":             retryRefusedStream,
	"retriable-4xx":              retry4xx, // 409 only, as Envoy
	"envoy-ratelimited":          0,
	"retriable-headers":          0,
	"http3-post-connect-failure": 0,
}

// retryPolicy is a decoded route (or virtual host) retry_policy.
type retryPolicy struct {
	on         retryOn
	codes      map[int]bool
	numRetries int
	perTry     time.Duration // 0: none (the route timeout bounds all tries)
	// Back-off between tries (Envoy's retry_back_off; 25 ms and 10x).
	backoffBase, backoffMax time.Duration
}

func decodeRetryPolicy(rp *routev3.RetryPolicy) (*retryPolicy, error) {
	if rp == nil {
		return nil, nil
	}
	out := &retryPolicy{numRetries: 1, codes: map[int]bool{}, backoffBase: retryBackoffBase, backoffMax: retryBackoffMax}
	if t := rp.GetPerTryTimeout(); t != nil {
		if err := t.CheckValid(); err != nil || t.AsDuration() < 0 {
			return nil, errors.New("retry_policy: per_try_timeout is invalid")
		}
		out.perTry = t.AsDuration()
	}
	if bo := rp.GetRetryBackOff(); bo != nil {
		base, maxI := bo.GetBaseInterval(), bo.GetMaxInterval()
		if base.CheckValid() != nil || base.AsDuration() <= 0 {
			return nil, errors.New("retry_policy: retry_back_off.base_interval must be positive")
		}
		out.backoffBase, out.backoffMax = base.AsDuration(), 10*base.AsDuration()
		if maxI != nil {
			if maxI.CheckValid() != nil || maxI.AsDuration() < out.backoffBase {
				return nil, errors.New("retry_policy: retry_back_off.max_interval must be at least base_interval")
			}
			out.backoffMax = maxI.AsDuration()
		}
	}
	for _, name := range strings.Split(rp.GetRetryOn(), ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		bit, ok := retryOnNames[name]
		if !ok {
			return nil, fmt.Errorf("retry_policy: retry_on %q is not supported", name)
		}
		out.on |= bit
	}
	if n := rp.GetNumRetries(); n != nil {
		out.numRetries = int(min(n.GetValue(), 10))
	}
	for _, c := range rp.GetRetriableStatusCodes() {
		if c < 100 || c > 599 {
			return nil, fmt.Errorf("retry_policy: retriable status code %d is not an HTTP status", c)
		}
		out.codes[int(c)] = true
	}
	return out, nil
}

// retriableStatus reports whether a response with this status is retried.
func (rp *retryPolicy) retriableStatus(code int) bool {
	switch {
	case rp.on&retry5xx != 0 && code >= 500:
		return true
	case rp.on&retryGatewayError != 0 && (code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout):
		return true
	case rp.on&retryRetriableStatusCodes != 0 && rp.codes[code]:
		return true
	case rp.on&retry4xx != 0 && code == http.StatusConflict:
		return true
	}
	return false
}

// retriableError reports whether a failed attempt (no response) is retried:
// connect failures under connect-failure, 5xx or gateway-error; a refused
// request (nothing of it reached the upstream) under refused-stream too;
// other resets under reset, 5xx or gateway-error.
func (rp *retryPolicy) retriableError(connectFailed, refused bool) bool {
	any5xx := rp.on&(retry5xx|retryGatewayError) != 0
	switch {
	case connectFailed:
		return any5xx || rp.on&retryConnectFailure != 0
	case refused && rp.on&retryRefusedStream != 0:
		return true
	}
	return any5xx || rp.on&retryReset != 0
}

// headerOp is one header to add, per Envoy's HeaderValueOption.
type headerOp struct {
	name   string // canonical
	value  string
	action corev3.HeaderValueOption_HeaderAppendAction
}

// headerMutation is a set of headers to remove, then add.
type headerMutation struct {
	remove []string
	add    []headerOp
}

func (m *headerMutation) empty() bool { return len(m.remove) == 0 && len(m.add) == 0 }

func decodeHeaderMutation(add []*corev3.HeaderValueOption, remove []string) (headerMutation, error) {
	var out headerMutation
	for _, r := range remove {
		if r == "" || strings.HasPrefix(r, ":") || strings.EqualFold(r, "host") {
			return out, fmt.Errorf("header %q cannot be removed", r)
		}
		out.remove = append(out.remove, http.CanonicalHeaderKey(r))
	}
	for _, o := range add {
		k := o.GetHeader().GetKey()
		if k == "" || strings.HasPrefix(k, ":") || strings.EqualFold(k, "host") {
			return out, fmt.Errorf("header %q cannot be added", k)
		}
		v := o.GetHeader().GetValue()
		if raw := o.GetHeader().GetRawValue(); len(raw) > 0 {
			v = string(raw)
		}
		op := headerOp{name: http.CanonicalHeaderKey(k), value: v, action: o.GetAppendAction()}
		//lint:ignore SA1019 the deprecated append flag is still what older control planes send
		if a := o.GetAppend(); a != nil && !a.GetValue() {
			op.action = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		}
		out.add = append(out.add, op)
	}
	return out, nil
}

// then appends the operations of a less specific level after m's.
func (m headerMutation) then(o headerMutation) headerMutation {
	return headerMutation{
		remove: append(append([]string(nil), m.remove...), o.remove...),
		add:    append(append([]headerOp(nil), m.add...), o.add...),
	}
}

// apply removes, then adds headers in h.
func (m *headerMutation) apply(h http.Header) {
	for _, name := range m.remove {
		delete(h, name)
	}
	for _, op := range m.add {
		_, exists := h[op.name]
		switch op.action {
		case corev3.HeaderValueOption_ADD_IF_ABSENT:
			if !exists {
				h[op.name] = []string{op.value}
			}
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
			h[op.name] = []string{op.value}
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
			if exists {
				h[op.name] = []string{op.value}
			}
		default:
			h[op.name] = append(h[op.name], op.value)
		}
	}
}

// hashKind is the source of a hash_policy.
type hashKind int

const (
	hashHeader hashKind = iota
	hashCookie
	hashSourceIP
	hashQuery
)

// hashPolicy is one decoded RouteAction.HashPolicy.
type hashPolicy struct {
	kind     hashKind
	name     string // header (lower case), cookie or query parameter name
	terminal bool
	// Cookie policies with a ttl: a request without the cookie gets one
	// generated (Set-Cookie on the response), ttl 0 meaning a session
	// cookie, so the client sticks to one endpoint.
	cookieTTL  *time.Duration
	cookiePath string
}

func decodeHashPolicies(hps []*routev3.RouteAction_HashPolicy) ([]hashPolicy, error) {
	var out []hashPolicy
	for i, hp := range hps {
		p := hashPolicy{terminal: hp.GetTerminal()}
		switch s := hp.GetPolicySpecifier().(type) {
		case *routev3.RouteAction_HashPolicy_Header_:
			p.kind, p.name = hashHeader, strings.ToLower(s.Header.GetHeaderName())
		case *routev3.RouteAction_HashPolicy_Cookie_:
			p.kind, p.name, p.cookiePath = hashCookie, s.Cookie.GetName(), s.Cookie.GetPath()
			if ttl := s.Cookie.GetTtl(); ttl != nil {
				if err := ttl.CheckValid(); err != nil || ttl.AsDuration() < 0 {
					return nil, fmt.Errorf("hash_policy[%d]: cookie ttl is invalid", i)
				}
				d := ttl.AsDuration()
				p.cookieTTL = &d
			}
		case *routev3.RouteAction_HashPolicy_ConnectionProperties_:
			if !s.ConnectionProperties.GetSourceIp() {
				continue
			}
			p.kind = hashSourceIP
		case *routev3.RouteAction_HashPolicy_QueryParameter_:
			p.kind, p.name = hashQuery, s.QueryParameter.GetName()
		default:
			return nil, fmt.Errorf("hash_policy[%d]: %T is not supported", i, s)
		}
		if p.kind != hashSourceIP && p.name == "" {
			return nil, fmt.Errorf("hash_policy[%d]: a name is required", i)
		}
		out = append(out, p)
	}
	return out, nil
}

// queryMatcher is a decoded QueryParameterMatcher.
type queryMatcher struct {
	name    string
	present bool // present_match (m is nil)
	m       *stringMatcher
}

func decodeQueryMatchers(qs []*routev3.QueryParameterMatcher) ([]queryMatcher, error) {
	var out []queryMatcher
	for i, q := range qs {
		if q.GetName() == "" {
			return nil, fmt.Errorf("query_parameters[%d]: name is empty", i)
		}
		qm := queryMatcher{name: q.GetName()}
		switch s := q.GetQueryParameterMatchSpecifier().(type) {
		case *routev3.QueryParameterMatcher_PresentMatch:
			qm.present = s.PresentMatch
			if !qm.present {
				return nil, fmt.Errorf("query_parameters[%d]: present_match false is not supported", i)
			}
		case *routev3.QueryParameterMatcher_StringMatch:
			sm, err := decodeStringMatcher(s.StringMatch)
			if err != nil {
				return nil, fmt.Errorf("query_parameters[%d]: %w", i, err)
			}
			qm.m = &sm
		case nil:
			qm.present = true
		default:
			return nil, fmt.Errorf("query_parameters[%d]: %T is not supported", i, s)
		}
		out = append(out, qm)
	}
	return out, nil
}

// decodeClusterHeaders decodes a weighted cluster's header mutations; nil
// when it has none.
func decodeClusterHeaders(c *routev3.WeightedCluster_ClusterWeight) (*clusterHeaders, error) {
	req, err := decodeHeaderMutation(c.GetRequestHeadersToAdd(), c.GetRequestHeadersToRemove())
	if err != nil {
		return nil, fmt.Errorf("request headers: %w", err)
	}
	resp, err := decodeHeaderMutation(c.GetResponseHeadersToAdd(), c.GetResponseHeadersToRemove())
	if err != nil {
		return nil, fmt.Errorf("response headers: %w", err)
	}
	if req.empty() && resp.empty() {
		return nil, nil
	}
	return &clusterHeaders{req: req, resp: resp}, nil
}
