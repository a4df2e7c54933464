package httpsrv

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// Policy says which requests Protect lets through.
//
// Host: a request's Host (port ignored) must be "localhost", a loopback
// address, the address the request came in on (so that a listener on
// "0.0.0.0" or "::" takes each of the host's addresses, including one
// added after start) or one of Hosts. A name in Hosts is compared
// case-insensitively; an unspecified address in Hosts adds nothing.
// Anything else is refused with 421: a page whose DNS name was rebound to
// 127.0.0.1 sends its own name.
//
// Origin: a request that carries an Origin header is refused with 403
// unless the origin is the request's own (scheme http or https, host:port
// equal to Host) or one of Origins ("https://ui.example:8443"). Browsers
// send Origin with every cross-origin request and with every POST, PUT and
// DELETE; the official clients and the CLI send none.
//
// Content-Type: a POST, PUT, PATCH or DELETE with a body type other than
// application/json (parameters such as charset allowed) is refused with
// 415; no Content-Type is fine. text/plain, multipart/form-data and
// application/x-www-form-urlencoded are what a browser may send cross-site
// without asking first.
type Policy struct {
	Hosts   []string
	Origins []string
	// Logger logs refusals at debug level (nil: none).
	Logger hclog.Logger
}

// guard is a Policy made ready to check requests.
type guard struct {
	names   map[string]bool
	ips     []net.IP
	origins map[string]bool
	log     hclog.Logger
	next    http.Handler
}

// Protect wraps next with p's Host, Origin and Content-Type checks.
func Protect(next http.Handler, p Policy) http.Handler {
	g := &guard{names: map[string]bool{"localhost": true}, origins: map[string]bool{}, log: p.Logger, next: next}
	if g.log == nil {
		g.log = hclog.NewNullLogger()
	}
	for _, h := range p.Hosts {
		h = normalizeHost(h)
		ip := net.ParseIP(h)
		switch {
		case ip == nil:
			if h != "" {
				g.names[h] = true
			}
		case ip.IsUnspecified():
			// Covered by the request's local address.
		default:
			g.ips = append(g.ips, ip)
		}
	}
	for _, o := range p.Origins {
		g.origins[normalizeOrigin(o)] = true
	}
	return g
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.hostAllowed(r.Host, localIP(r)) {
		g.refuse(w, r, http.StatusMisdirectedRequest, fmt.Sprintf("host %q is not one of this agent's names or addresses; add it to http_api.allowed_hosts to allow it", r.Host))
		return
	}
	if o := r.Header.Get("Origin"); o != "" && !g.originAllowed(o, r.Host) {
		g.refuse(w, r, http.StatusForbidden, fmt.Sprintf("cross-origin request from %q refused; add it to http_api.allowed_origins to allow it", o))
		return
	}
	if writeMethod(r.Method) {
		if ct := r.Header.Get("Content-Type"); ct != "" {
			if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
				g.refuse(w, r, http.StatusUnsupportedMediaType, fmt.Sprintf("content type %q refused: send application/json", ct))
				return
			}
		}
	}
	g.next.ServeHTTP(w, r)
}

func (g *guard) refuse(w http.ResponseWriter, r *http.Request, code int, msg string) {
	g.log.Debug("request refused", "method", r.Method, "path", r.URL.Path, "remote_addr", r.RemoteAddr, "status", code, "error", msg)
	http.Error(w, msg, code)
}

func (g *guard) hostAllowed(hostport string, local net.IP) bool {
	if hostport == "" {
		return true // HTTP/1.0 without Host: no browser sends that
	}
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = normalizeHost(h)
	ip := net.ParseIP(h)
	if ip == nil {
		return g.names[h]
	}
	if ip.IsLoopback() || ip.Equal(local) {
		return true
	}
	for _, own := range g.ips {
		if own.Equal(ip) {
			return true
		}
	}
	return false
}

func (g *guard) originAllowed(origin, host string) bool {
	if g.origins[normalizeOrigin(origin)] {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false // includes "null" (sandboxed frames, file: pages)
	}
	return strings.EqualFold(u.Host, host)
}

func writeMethod(m string) bool {
	switch m {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// normalizeHost lower-cases h and drops IPv6 brackets and a trailing dot.
func normalizeHost(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(h, ".")
}

func normalizeOrigin(o string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(o)), "/")
}

// localIP is the address the request's connection was accepted on (nil
// when unknown).
func localIP(r *http.Request) net.IP {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok {
		return a.IP
	}
	return nil
}
