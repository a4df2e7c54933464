package configentry

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	consul "github.com/hashicorp/consul/api"
)

// validMethods are the HTTP methods a route may match.
var validMethods = map[string]bool{
	"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true,
	"CONNECT": true, "OPTIONS": true, "TRACE": true, "PATCH": true,
}

// validRetryOn are Envoy's retry conditions Consul accepts in RetryOn.
var validRetryOn = map[string]bool{
	"5xx": true, "gateway-error": true, "reset": true, "connect-failure": true,
	"envoy-ratelimited": true, "retriable-4xx": true, "refused-stream": true,
	"cancelled": true, "deadline-exceeded": true, "internal": true,
	"resource-exhausted": true, "unavailable": true,
}

func validateRouter(e *consul.ServiceRouterConfigEntry) error {
	if err := checkName(e.Name); err != nil {
		return err
	}
	if err := checkTenancy("", e.Namespace, e.Partition); err != nil {
		return err
	}
	for i := range e.Routes {
		r := &e.Routes[i]
		where := fmt.Sprintf("Routes[%d].", i)
		var m *consul.ServiceRouteHTTPMatch
		if r.Match != nil {
			m = r.Match.HTTP
		}
		if err := checkHTTPMatch(where+"Match.HTTP.", m); err != nil {
			return err
		}
		if err := checkDestination(where+"Destination.", r.Destination, m); err != nil {
			return err
		}
	}
	return nil
}

func checkHTTPMatch(where string, m *consul.ServiceRouteHTTPMatch) error {
	if m == nil {
		return nil
	}
	n := 0
	for _, p := range []string{m.PathExact, m.PathPrefix, m.PathRegex} {
		if p != "" {
			n++
		}
	}
	if n > 1 {
		return invalidf("%s: PathExact, PathPrefix and PathRegex are mutually exclusive", strings.TrimSuffix(where, "."))
	}
	if m.PathExact != "" && !strings.HasPrefix(m.PathExact, "/") {
		return invalidf("%sPathExact %q does not start with \"/\"", where, m.PathExact)
	}
	if m.PathPrefix != "" && !strings.HasPrefix(m.PathPrefix, "/") {
		return invalidf("%sPathPrefix %q does not start with \"/\"", where, m.PathPrefix)
	}
	if err := checkRegex(where+"PathRegex", m.PathRegex); err != nil {
		return err
	}
	for j, h := range m.Header {
		hw := fmt.Sprintf("%sHeader[%d]", where, j)
		if h.Name == "" {
			return invalidf("%s: Name is required", hw)
		}
		if count(h.Present, h.Exact != "", h.Prefix != "", h.Suffix != "", h.Regex != "") != 1 {
			return invalidf("%s (%q): exactly one of Present, Exact, Prefix, Suffix or Regex is required", hw, h.Name)
		}
		if err := checkRegex(hw+".Regex", h.Regex); err != nil {
			return err
		}
	}
	for j, q := range m.QueryParam {
		qw := fmt.Sprintf("%sQueryParam[%d]", where, j)
		if q.Name == "" {
			return invalidf("%s: Name is required", qw)
		}
		if count(q.Present, q.Exact != "", q.Regex != "") != 1 {
			return invalidf("%s (%q): exactly one of Present, Exact or Regex is required", qw, q.Name)
		}
		if err := checkRegex(qw+".Regex", q.Regex); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for j, meth := range m.Methods {
		up := strings.ToUpper(strings.TrimSpace(meth))
		if !validMethods[up] {
			return invalidf("%sMethods[%d]: %q is not a valid HTTP method", where, j, meth)
		}
		if seen[up] {
			return invalidf("%sMethods[%d]: method %q given twice", where, j, up)
		}
		seen[up] = true
		m.Methods[j] = up
	}
	return nil
}

func checkDestination(where string, d *consul.ServiceRouteDestination, m *consul.ServiceRouteHTTPMatch) error {
	if d == nil {
		return nil
	}
	if d.Service != "" {
		if err := checkName(d.Service); err != nil {
			return invalidf("%sService %q is not a valid service name", where, d.Service)
		}
	}
	if d.ServiceSubset != "" && !validSubsetName.MatchString(d.ServiceSubset) {
		return invalidf("%sServiceSubset %q is not a valid subset name", where, d.ServiceSubset)
	}
	if err := checkTenancy(where, d.Namespace, d.Partition); err != nil {
		return err
	}
	if d.PrefixRewrite != "" && (m == nil || (m.PathExact == "" && m.PathPrefix == "")) {
		return invalidf("%sPrefixRewrite needs a PathExact or PathPrefix match", where)
	}
	if d.RequestTimeout < 0 {
		return invalidf("%sRequestTimeout %s must be >= 0", where, d.RequestTimeout)
	}
	if d.IdleTimeout < 0 {
		return invalidf("%sIdleTimeout %s must be >= 0", where, d.IdleTimeout)
	}
	for _, c := range d.RetryOnStatusCodes {
		if c < 100 || c > 599 {
			return invalidf("%sRetryOnStatusCodes: %d is not an HTTP status code", where, c)
		}
	}
	for _, r := range d.RetryOn {
		if !validRetryOn[r] {
			return invalidf("%sRetryOn: %q is not a retry condition (one of %s)", where, r, strings.Join(sortedKeys(validRetryOn), ", "))
		}
	}
	if err := checkHeaderMods(where+"RequestHeaders", d.RequestHeaders); err != nil {
		return err
	}
	return checkHeaderMods(where+"ResponseHeaders", d.ResponseHeaders)
}

func checkRegex(where, re string) error {
	if re == "" {
		return nil
	}
	if _, err := regexp.Compile(re); err != nil {
		return invalidf("%s %q does not compile: %s", where, re, oneLine(err.Error()))
	}
	return nil
}

func count(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
