package sidecar

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// stringMatcher is a decoded envoy.type.matcher.v3.StringMatcher.
type stringMatcher struct {
	exact, prefix, suffix, contains *string
	re                              *regexp.Regexp
	ignoreCase                      bool
}

func decodeStringMatcher(m *matcherv3.StringMatcher) (stringMatcher, error) {
	if m == nil {
		return stringMatcher{}, errors.New("string matcher is empty")
	}
	out := stringMatcher{ignoreCase: m.GetIgnoreCase()}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		out.exact = &p.Exact
	case *matcherv3.StringMatcher_Prefix:
		out.prefix = &p.Prefix
	case *matcherv3.StringMatcher_Suffix:
		out.suffix = &p.Suffix
	case *matcherv3.StringMatcher_Contains:
		out.contains = &p.Contains
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := compileRegex(p.SafeRegex.GetRegex())
		if err != nil {
			return out, err
		}
		out.re = re
	default:
		return out, fmt.Errorf("string matcher pattern %T is not supported", p)
	}
	return out, nil
}

// compileRegex compiles an Envoy safe_regex (RE2, as Go's regexp) so that it
// must match the whole input, as Envoy's full-match semantics require.
func compileRegex(expr string) (*regexp.Regexp, error) {
	re, err := regexp.Compile("^(?:" + expr + ")$")
	if err != nil {
		return nil, fmt.Errorf("failed to compile regex %q: %w", expr, err)
	}
	return re, nil
}

func (m stringMatcher) match(s string) bool {
	fold := func(v string) string {
		if m.ignoreCase {
			return strings.ToLower(v)
		}
		return v
	}
	switch {
	case m.exact != nil:
		return fold(s) == fold(*m.exact)
	case m.prefix != nil:
		return strings.HasPrefix(fold(s), fold(*m.prefix))
	case m.suffix != nil:
		return strings.HasSuffix(fold(s), fold(*m.suffix))
	case m.contains != nil:
		return strings.Contains(fold(s), fold(*m.contains))
	case m.re != nil:
		return m.re.MatchString(s)
	}
	return false
}

// sanType says which subject alternative names a sanMatcher looks at.
type sanType int

const (
	sanAny sanType = iota // deprecated match_subject_alt_names: any SAN
	sanDNS
	sanURI
	sanEmail
	sanIP
)

// sanMatcher is one entry of match_typed_subject_alt_names (or the
// deprecated match_subject_alt_names, which matches any SAN type).
type sanMatcher struct {
	kind sanType
	m    stringMatcher
}

// matchesAny reports whether a peer with these SANs satisfies the matcher.
func (s sanMatcher) matchesAny(dns []string, uris []*url.URL, emails []string, ips []string) bool {
	check := func(vals []string) bool {
		for _, v := range vals {
			if s.m.match(v) {
				return true
			}
		}
		return false
	}
	uriStrings := make([]string, 0, len(uris))
	for _, u := range uris {
		uriStrings = append(uriStrings, u.String())
	}
	switch s.kind {
	case sanDNS:
		return check(dns)
	case sanURI:
		return check(uriStrings)
	case sanEmail:
		return check(emails)
	case sanIP:
		return check(ips)
	}
	return check(dns) || check(uriStrings) || check(emails) || check(ips)
}
