package authz

import (
	"fmt"
	"net/http"
	"strings"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/intention"
)

// l7Connection decides a connection whose deciding intention is an L7
// one: it is admitted when the destination speaks HTTP, so that its proxy
// checks every request against the permissions; a tcp destination could
// not, so it is refused (fail closed).
func (s *Service) l7Connection(m *intention.Intention, dest string) Decision {
	if s.isHTTP(dest) {
		return Decision{Allowed: true, Matched: m, Permission: intention.NoPermission,
			Reason: fmt.Sprintf("admitted for per-request checks by L7 intention %s", m)}
	}
	return Decision{Matched: m, Permission: intention.NoPermission,
		Reason: fmt.Sprintf("denied: L7 intention %s needs destination %q to have protocol http, http2 or grpc (service-defaults)", m, dest)}
}

// AuthorizeRequest decides one HTTP request from the identity sourceURI
// to destService (Consul 1.9's L7 intentions): the deciding intention's
// first matching permission, or its action, or the default policy.
func (s *Service) AuthorizeRequest(sourceURI, destService string, req intention.Request) (Decision, error) {
	d, err := s.decideRequest(sourceURI, destService, req)
	s.record(d)
	return d, err
}

func (s *Service) decideRequest(sourceURI, destService string, req intention.Request) (Decision, error) {
	d, err := s.decide(sourceURI, destService)
	if err != nil || d.Matched == nil || !d.Matched.IsL7() {
		// Identity failures, no intention or an L4 intention: the
		// connection's answer is the request's.
		if d.Matched == nil || !d.Matched.IsL7() {
			d.Permission = intention.NoPermission
		}
		return d, err
	}
	src, _ := ca.ParseSpiffeID(sourceURI) // decide parsed it already
	allowed, m, perm := s.ix.CheckRequest(src.Service, destService, req)
	out := Decision{Allowed: allowed, Matched: m, Permission: perm}
	verb := "denied"
	if allowed {
		verb = "allowed"
	}
	if m == nil || !m.IsL7() {
		// The intentions changed between the two reads; answer the new one.
		out.Permission = intention.NoPermission
		out.Reason = fmt.Sprintf("%s by %s", verb, describe(m))
		return out, nil
	}
	if perm == intention.NoPermission {
		out.Reason = fmt.Sprintf("%s by the default policy: no permission of intention %s matches %s %s", verb, m, req.Method, req.Path)
	} else {
		out.Reason = fmt.Sprintf("%s by permission %d of intention %s", verb, perm+1, m)
	}
	return out, nil
}

func describe(m *intention.Intention) string {
	if m == nil {
		return "the default policy"
	}
	return "intention " + m.String()
}

// requestOf reads an HTTP ext_authz request's attributes; ok is false for
// a network (connection) check.
func requestOf(attrs *authv3.AttributeContext) (intention.Request, bool) {
	h := attrs.GetRequest().GetHttp()
	if h == nil {
		return intention.Request{}, false
	}
	path := h.GetPath()
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	hdr := http.Header{}
	for k, v := range h.GetHeaders() {
		if strings.HasPrefix(k, ":") {
			continue
		}
		hdr.Add(k, v)
	}
	method := h.GetMethod()
	if method == "" {
		method = h.GetHeaders()[":method"]
	}
	if path == "" {
		path = h.GetHeaders()[":path"]
		if i := strings.IndexByte(path, '?'); i >= 0 {
			path = path[:i]
		}
	}
	return intention.Request{Method: strings.ToUpper(method), Path: path, Header: hdr}, true
}
