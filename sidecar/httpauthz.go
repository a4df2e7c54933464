package sidecar

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// authzPeer is the downstream identity sent with every HTTP ext_authz
// check of a connection, computed once.
type authzPeer struct {
	uri, cert, ourURI string
}

func (h *h1conn) authzPeerInfo(includeCert bool) *authzPeer {
	if h.peer != nil {
		return h.peer
	}
	p := &authzPeer{}
	if tc, ok := h.c.Conn.(*tls.Conn); ok {
		p.uri = peerURI(tc)
		if certs := tc.ConnectionState().PeerCertificates; includeCert && len(certs) > 0 {
			// Envoy sends the URL-encoded PEM of the peer's leaf.
			p.cert = url.QueryEscape(string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certs[0].Raw})))
		}
	}
	if t := h.c.state.cfg.chain.tls; t != nil {
		p.ourURI = h.l.p.secrets.leafURI(t.cert)
	}
	h.peer = p
	return p
}

// checkRequest builds the Check request Envoy's HTTP ext_authz filter
// sends: the peers (source principal = the client certificate's URI SAN)
// and the request's method, path, host and headers (lower-case names,
// pseudo headers included, repeated values joined by ",").
func (h *h1conn) checkRequest(req *http.Request, cfg *httpAuthzConfig) *authv3.CheckRequest {
	peer := h.authzPeerInfo(cfg.includePeerCert)
	path := req.RequestURI
	if path == "" {
		path = req.URL.RequestURI()
	}
	hdrs := make(map[string]string, len(req.Header)+4)
	for k, v := range req.Header {
		hdrs[strings.ToLower(k)] = strings.Join(v, ",")
	}
	hdrs[":authority"], hdrs[":method"], hdrs[":path"], hdrs[":scheme"] = req.Host, req.Method, path, h.proto
	size := req.ContentLength
	if req.Body == http.NoBody {
		size = 0
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{Address: socketAddress(h.c.RemoteAddr()), Principal: peer.uri, Certificate: peer.cert},
		Destination: &authv3.AttributeContext_Peer{Address: socketAddress(h.c.LocalAddr()), Principal: peer.ourURI},
		Request: &authv3.AttributeContext_Request{Time: timestamppb.Now(), Http: &authv3.AttributeContext_HttpRequest{
			Id: strconv.FormatUint(rand.Uint64(), 16), Method: req.Method, Headers: hdrs, Path: path,
			Host: req.Host, Scheme: h.proto, Protocol: req.Proto, Size: size,
		}},
	}}
}

// authzVerdict is the HTTP ext_authz filter's answer for one request:
// go on, or reply with code, headers and body.
type authzVerdict struct {
	allow bool
	code  int
	hdr   http.Header
	body  string
}

// extAuthz runs the HTTP ext_authz filter on one request (HTTP/1.1). ok is
// true when the request may go on; otherwise the answer was sent and kept
// says whether the connection stays open.
func (h *h1conn) extAuthz(req *http.Request, cfg *httpAuthzConfig, keep bool) (ok, kept bool) {
	v := h.checkHTTP(req, cfg)
	if v.allow {
		return true, keep
	}
	return false, h.reply(req, v.code, v.hdr, v.body, keep)
}

// checkHTTP asks the authorization service about one request. A failed
// check answers status_on_error (403, fail closed) unless
// failure_mode_allow is set. Safe for concurrent use once h.peer is set.
func (h *h1conn) checkHTTP(req *http.Request, cfg *httpAuthzConfig) authzVerdict {
	st := h.c.state.httpStats
	a := h.l.p.authz
	peer := h.authzPeerInfo(cfg.includePeerCert)
	key := [2]string{peer.uri, peer.ourURI}
	if a.cache.allows(key) {
		st.authzCacheHit.Add(1)
		return authzVerdict{allow: true}
	}
	ctx, cancel := context.WithTimeout(h.l.ctx, cfg.timeout)
	defer cancel()
	if a.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-consul-token", a.token)
	}
	resp, err := a.client.Check(ctx, h.checkRequest(req, cfg))
	if err != nil {
		st.authzError.Add(1)
		if cfg.failureModeAllow {
			st.authzFailureModeAllowed.Add(1)
			return authzVerdict{allow: true}
		}
		h.l.log.Warn("request authorization failed, denying", "error", err)
		return authzVerdict{code: cfg.statusOnError, hdr: http.Header{}}
	}
	if resp.GetStatus().GetCode() == int32(codes.OK) {
		st.authzOK.Add(1)
		okr := resp.GetOkResponse()
		if len(okr.GetHeaders()) == 0 && len(okr.GetHeadersToRemove()) == 0 {
			a.cache.put(key, responseEpoch(resp)) // only an answer that changes nothing
		} else if m, err := decodeHeaderMutation(okr.GetHeaders(), okr.GetHeadersToRemove()); err == nil {
			m.apply(req.Header)
		}
		return authzVerdict{allow: true}
	}
	st.authzDenied.Add(1)
	d := resp.GetDeniedResponse()
	v := authzVerdict{code: int(d.GetStatus().GetCode()), hdr: http.Header{}, body: d.GetBody()}
	if v.code == 0 {
		v.code = http.StatusForbidden
	}
	if m, err := decodeHeaderMutation(d.GetHeaders(), nil); err == nil {
		m.apply(v.hdr)
	}
	return v
}

// reply answers with a response made here: status, headers and body.
func (h *h1conn) reply(req *http.Request, code int, hdr http.Header, body string, keep bool) bool {
	keep = h.keepOpen(keep)
	h.c.state.httpStats.rqClass[statusClass(code)].Add(1)
	removeHopHeaders(hdr)
	hdr.Del("Content-Length")
	if body != "" && hdr.Get("Content-Type") == "" {
		hdr.Set("Content-Type", "text/plain")
	}
	statusLine(h.bw, code, "")
	_, _ = h.bw.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	if !keep {
		_, _ = h.bw.WriteString("Connection: close\r\n")
	}
	_ = hdr.Write(h.bw)
	_, _ = h.bw.WriteString("\r\n")
	if req.Method != http.MethodHead {
		_, _ = h.bw.WriteString(body)
	}
	return h.bw.Flush() == nil && keep
}
