package consulapi

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/intention"
)

// intentionCheckResponse is Consul's {"Allowed": bool} plus meshlet's
// explanation (consul/api ignores the extra fields).
type intentionCheckResponse struct {
	Allowed bool
	Reason  string
	// Permission is the 0-based index of the deciding permission of an
	// L7 intention, -1 when none decided.
	Permission int
}

// checkRequestOf reads the optional HTTP request of an intention check.
func checkRequestOf(r *http.Request) (intention.Request, bool, error) {
	q := r.URL.Query()
	method, path, headers := q.Get("method"), q.Get("path"), q["header"]
	if method == "" && path == "" && len(headers) == 0 {
		return intention.Request{}, false, nil
	}
	if method == "" {
		method = http.MethodGet
	}
	if path == "" {
		path = "/"
	}
	if !strings.HasPrefix(path, "/") {
		return intention.Request{}, false, badRequest("path %q must start with \"/\"", path)
	}
	h := http.Header{}
	for _, kv := range headers {
		name, value, ok := strings.Cut(kv, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return intention.Request{}, false, badRequest("header %q must be Name:Value", kv)
		}
		h.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	return intention.Request{Method: strings.ToUpper(method), Path: path, Header: h}, true, nil
}

// explainCheck says which intention and permission decided a check.
func explainCheck(src, dst string, allowed bool, m *intention.Intention, perm int, isHTTP bool) string {
	verb := "denied"
	if allowed {
		verb = "allowed"
	}
	switch {
	case m == nil:
		return fmt.Sprintf("%s by the default policy: no intention matches %s => %s", verb, src, dst)
	case !m.IsL7():
		return fmt.Sprintf("%s by intention %s", verb, m)
	case !isHTTP:
		return fmt.Sprintf("intention %s is an L7 intention: its permissions decide each HTTP request (give a method, path or header)", m)
	case perm == intention.NoPermission:
		return fmt.Sprintf("%s by the default policy: no permission of intention %s matches", verb, m)
	default:
		return fmt.Sprintf("%s by permission %d of intention %s: %s", verb, perm+1, m, describePermission(m.Permissions[perm]))
	}
}

// describePermission renders a permission in one line.
func describePermission(p *intention.Permission) string {
	var parts []string
	h := p.HTTP
	switch {
	case h.PathExact != "":
		parts = append(parts, "path is "+h.PathExact)
	case h.PathPrefix != "":
		parts = append(parts, "path starts with "+h.PathPrefix)
	case h.PathRegex != "":
		parts = append(parts, "path matches "+h.PathRegex)
	}
	for _, hd := range h.Header {
		parts = append(parts, "header "+hd.Name)
	}
	if len(h.Methods) > 0 {
		parts = append(parts, "method in "+strings.Join(h.Methods, ","))
	}
	return p.Action + " when " + strings.Join(parts, " and ")
}

// checkL7Protocol refuses an intention with permissions whose destination
// does not speak HTTP, as Consul does at write time: its permissions could
// never match a request (the proxy sees bytes, not requests).
func (s *Server) checkL7Protocol(in intention.Intention) error {
	if len(in.Permissions) == 0 || in.DestinationName == intention.Wildcard {
		return nil
	}
	set, _ := s.d.ConfigEntries.Current()
	if p := set.Protocol(in.DestinationName); !configentry.IsHTTP(p) {
		return badRequest("intention %s => %s has permissions, which need an HTTP destination, but %s's protocol is %q: write a service-defaults entry with Protocol http, http2 or grpc first",
			in.SourceName, in.DestinationName, in.DestinationName, p)
	}
	return nil
}
