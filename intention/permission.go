package intention

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// Permission is one L7 rule of an intention (Consul 1.9's shape): the
// first permission whose HTTP match selects a request decides it.
type Permission struct {
	Action string
	HTTP   *HTTPPermission `json:",omitempty"`
}

// HTTPPermission matches an HTTP request: at most one path rule, every
// header rule, and one of Methods when set.
type HTTPPermission struct {
	PathExact  string             `json:",omitempty"`
	PathPrefix string             `json:",omitempty"`
	PathRegex  string             `json:",omitempty"`
	Header     []HeaderPermission `json:",omitempty"`
	Methods    []string           `json:",omitempty"`

	pathRE *regexp.Regexp
}

// HeaderPermission matches one request header: exactly one of Present,
// Exact, Prefix, Suffix, Contains or Regex; Invert negates it.
type HeaderPermission struct {
	Name       string
	Present    bool   `json:",omitempty"`
	Exact      string `json:",omitempty"`
	Prefix     string `json:",omitempty"`
	Suffix     string `json:",omitempty"`
	Contains   string `json:",omitempty"`
	Regex      string `json:",omitempty"`
	Invert     bool   `json:",omitempty"`
	IgnoreCase bool   `json:",omitempty"`

	re *regexp.Regexp
}

// Request is what an L7 permission looks at.
type Request struct {
	Method string
	Path   string // without the query string
	Header http.Header
}

var httpMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodConnect: true,
	http.MethodOptions: true, http.MethodTrace: true,
}

// normalizePermissions validates and compiles in.Permissions; an
// intention has either an Action or Permissions, as in Consul.
func normalizePermissions(in *Intention) error {
	if len(in.Permissions) == 0 {
		return nil
	}
	if in.Action != "" {
		return fmt.Errorf("%w: an intention has either an action or permissions, not both", ErrInvalid)
	}
	out := make([]*Permission, len(in.Permissions))
	for i, p := range in.Permissions {
		if p == nil {
			return fmt.Errorf("%w: permission %d is empty", ErrInvalid, i)
		}
		cp, err := normalizePermission(*p)
		if err != nil {
			return fmt.Errorf("%w: permission %d: %w", ErrInvalid, i, err)
		}
		out[i] = &cp
	}
	in.Permissions = out
	return nil
}

func normalizePermission(p Permission) (Permission, error) {
	p.Action = strings.ToLower(p.Action)
	if p.Action != ActionAllow && p.Action != ActionDeny {
		return p, fmt.Errorf("action %q must be %q or %q", p.Action, ActionAllow, ActionDeny)
	}
	if p.HTTP == nil {
		return p, fmt.Errorf("HTTP is required")
	}
	h := *p.HTTP
	n := 0
	for _, v := range []string{h.PathExact, h.PathPrefix, h.PathRegex} {
		if v != "" {
			n++
		}
	}
	switch {
	case n > 1:
		return p, fmt.Errorf("at most one of PathExact, PathPrefix or PathRegex may be set")
	case h.PathExact != "" && !strings.HasPrefix(h.PathExact, "/"):
		return p, fmt.Errorf("PathExact %q does not start with \"/\"", h.PathExact)
	case h.PathPrefix != "" && !strings.HasPrefix(h.PathPrefix, "/"):
		return p, fmt.Errorf("PathPrefix %q does not start with \"/\"", h.PathPrefix)
	case n == 0 && len(h.Header) == 0 && len(h.Methods) == 0:
		return p, fmt.Errorf("HTTP must match on a path, a header or a method")
	}
	if h.PathRegex != "" {
		re, err := fullRegexp(h.PathRegex)
		if err != nil {
			return p, fmt.Errorf("PathRegex: %w", err)
		}
		h.pathRE = re
	}
	h.Header = append([]HeaderPermission(nil), h.Header...)
	for i := range h.Header {
		if err := h.Header[i].compile(); err != nil {
			return p, fmt.Errorf("header %d: %w", i, err)
		}
	}
	h.Methods = append([]string(nil), h.Methods...)
	for i, m := range h.Methods {
		h.Methods[i] = strings.ToUpper(m)
		if !httpMethods[h.Methods[i]] {
			return p, fmt.Errorf("method %q is not an HTTP method", m)
		}
	}
	p.HTTP = &h
	return p, nil
}

func (hp *HeaderPermission) compile() error {
	if hp.Name == "" {
		return errors.New("a header needs a Name")
	}
	n := 0
	if hp.Present {
		n++
	}
	for _, v := range []string{hp.Exact, hp.Prefix, hp.Suffix, hp.Contains, hp.Regex} {
		if v != "" {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("header %q needs exactly one of Present, Exact, Prefix, Suffix, Contains or Regex", hp.Name)
	}
	if hp.Regex != "" {
		expr := hp.Regex
		if hp.IgnoreCase {
			expr = "(?i)" + expr
		}
		re, err := fullRegexp(expr)
		if err != nil {
			return fmt.Errorf("header %q: %w", hp.Name, err)
		}
		hp.re = re
	}
	return nil
}

// fullRegexp compiles an RE2 expression that must match the whole input,
// as Envoy's safe_regex does.
func fullRegexp(expr string) (*regexp.Regexp, error) {
	re, err := regexp.Compile("^(?:" + expr + ")$")
	if err != nil {
		return nil, fmt.Errorf("invalid regex %q: %w", expr, err)
	}
	return re, nil
}

// Matches reports whether the permission's HTTP rule selects req.
func (p *Permission) Matches(req Request) bool {
	h := p.HTTP
	if h == nil {
		return false
	}
	switch {
	case h.PathExact != "" && req.Path != h.PathExact:
		return false
	case h.PathPrefix != "" && !strings.HasPrefix(req.Path, h.PathPrefix):
		return false
	case h.PathRegex != "" && !h.regexp().MatchString(req.Path):
		return false
	}
	for i := range h.Header {
		if !h.Header[i].matches(req.Header) {
			return false
		}
	}
	if len(h.Methods) == 0 {
		return true
	}
	for _, m := range h.Methods {
		if m == req.Method {
			return true
		}
	}
	return false
}

// regexp returns the compiled PathRegex (compiling it for a permission
// that did not go through normalize, e.g. built by a caller).
func (h *HTTPPermission) regexp() *regexp.Regexp {
	if h.pathRE == nil {
		re, err := fullRegexp(h.PathRegex)
		if err != nil {
			return regexp.MustCompile(`^\b$`) // matches nothing
		}
		return re
	}
	return h.pathRE
}

func (hp *HeaderPermission) matches(hdr http.Header) bool {
	vals, ok := hdr[http.CanonicalHeaderKey(hp.Name)]
	var res bool
	switch {
	case hp.Present:
		res = ok
	case !ok:
		return false // a missing header matches no value rule, inverted or not
	default:
		v := strings.Join(vals, ",")
		res = hp.matchValue(v)
	}
	return res != hp.Invert
}

func (hp *HeaderPermission) matchValue(v string) bool {
	fold := func(s string) string {
		if hp.IgnoreCase {
			return strings.ToLower(s)
		}
		return s
	}
	switch {
	case hp.Exact != "":
		return fold(v) == fold(hp.Exact)
	case hp.Prefix != "":
		return strings.HasPrefix(fold(v), fold(hp.Prefix))
	case hp.Suffix != "":
		return strings.HasSuffix(fold(v), fold(hp.Suffix))
	case hp.Contains != "":
		return strings.Contains(fold(v), fold(hp.Contains))
	case hp.Regex != "":
		re := hp.re
		if re == nil {
			var err error
			if re, err = fullRegexp(hp.Regex); err != nil {
				return false
			}
		}
		return re.MatchString(v)
	}
	return false
}
