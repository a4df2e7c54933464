package sidecar

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/url"
)

// maxFastHeaders bounds the header lines readRequestHead takes; a longer
// head goes to http.ReadRequest.
const maxFastHeaders = 32

// fastHeaderNames are header names a request head may carry on the fast
// path, interned; any other valid name is taken from the head itself.
// Names with semantics of their own for a request's framing or connection
// (Content-Length, Transfer-Encoding, Connection, Upgrade, Expect, Trailer,
// Pragma) are absent on purpose: see readRequestHead.
var fastHeaderNames = func() map[string]string {
	m := map[string]string{}
	for _, n := range []string{
		"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Cache-Control", "Content-Type",
		"Cookie", "Host", "If-Modified-Since", "If-None-Match", "Origin", "Referer", "Te", "User-Agent",
		"X-B3-Parentspanid", "X-B3-Sampled", "X-B3-Spanid", "X-B3-Traceid", "X-Envoy-Original-Path",
		"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Request-Id", "Traceparent", "Tracestate",
	} {
		m[n] = n
	}
	return m
}()

// slowHeaderNames send a request to http.ReadRequest: they change how the
// request is framed or what the connection does, which is its business.
var slowHeaderNames = map[string]bool{
	"Content-Length": true, "Transfer-Encoding": true, "Connection": true, "Upgrade": true,
	"Expect": true, "Trailer": true, "Pragma": true, "Proxy-Connection": true, "Keep-Alive": true,
}

// slowResponseHeaders are slowHeaderNames but Content-Length, which a
// response's fast path reads itself.
var slowResponseHeaders = func() map[string]bool {
	m := map[string]bool{}
	for k := range slowHeaderNames {
		m[k] = k != "Content-Length"
	}
	return m
}()

// readRequest reads the next request: readRequestHead when it can, else
// http.ReadRequest (which then reads the same bytes, none consumed), a
// head with both Content-Length and Transfer-Encoding refused
// (errFramingConflict; the fast path takes neither). sc, when set, is
// reused for a fast-path request (see reqScratch), and its scan serves
// the slow path.
func readRequest(br *bufio.Reader, sc *reqScratch) (*http.Request, error) {
	if req := readRequestHead(br, sc); req != nil {
		return req, nil
	}
	if sc == nil {
		return readRequestSlow(br, &framingScan{})
	}
	return readRequestSlow(br, &sc.scan)
}

// bufferedHead returns the head at the start of br's buffer, up to and
// including its blank line, waiting for more bytes while it is
// incomplete and fits the buffer; nil if it does not fit or a read
// fails. Nothing is consumed.
func bufferedHead(br *bufio.Reader) []byte {
	n := br.Buffered()
	if n == 0 {
		if _, err := br.Peek(1); err != nil {
			return nil
		}
		n = br.Buffered()
	}
	for {
		buf, _ := br.Peek(n)
		if end := bytes.Index(buf, []byte("\r\n\r\n")); end >= 0 {
			return buf[:end+4]
		}
		if bareLF(buf) {
			// Lines ended by a bare LF: net/http reads them, from what
			// is buffered, without waiting for a CRLF that never comes.
			return nil
		}
		if n >= br.Size() {
			return nil
		}
		if _, err := br.Peek(n + 1); err != nil {
			return nil
		}
		n = br.Buffered()
	}
}

// bareLF reports whether buf has a line ended by "\n" alone.
func bareLF(buf []byte) bool {
	for i := bytes.IndexByte(buf, '\n'); i >= 0; {
		if i == 0 || buf[i-1] != '\r' {
			return true
		}
		j := bytes.IndexByte(buf[i+1:], '\n')
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}

// readRequestHead parses the common request of a keep-alive proxy, as
// http.ReadRequest would, with a handful of allocations (the head copied
// into one string that every value shares, the Request, its URL, the
// header map and one slice for all values): HTTP/1.1, an origin-form
// target needing no unescaping, one plain Host, no body (no
// Content-Length or Transfer-Encoding) and none of slowHeaderNames, the
// whole head in br's buffer. For anything else (or a read error) it
// returns nil having consumed nothing, and http.ReadRequest decides.
func readRequestHead(br *bufio.Reader, sc *reqScratch) *http.Request {
	head := bufferedHead(br)
	if head == nil {
		return nil
	}
	req := parseRequestHead(head, sc)
	if req != nil {
		_, _ = br.Discard(len(head))
	}
	return req
}

// headLines are the header lines of a head: canonical names and value
// bounds in the head.
type headLines struct {
	names [maxFastHeaders]string
	vals  [maxFastHeaders][2]int
	n     int
}

// parseHeaders reads the header lines of head b (s is b as a string)
// from pos to the blank line; false for anything http.ReadRequest or
// http.ReadResponse should judge: a line without a colon or starting with
// blanks (obs-fold), an invalid name or value, too many lines, a name in
// slowHeaderNames.
func parseHeaders(b []byte, s string, pos int, hl *headLines, slow map[string]bool) bool {
	for pos < len(b)-2 {
		end := pos + bytes.Index(b[pos:], []byte("\r\n"))
		colon := bytes.IndexByte(b[pos:end], ':')
		if hl.n == maxFastHeaders || colon <= 0 {
			return false
		}
		name, ok := headerName(s, pos, pos+colon)
		if !ok || slow[name] {
			return false
		}
		vs, ve := pos+colon+1, end
		for vs < ve && (b[vs] == ' ' || b[vs] == '\t') {
			vs++
		}
		for ve > vs && (b[ve-1] == ' ' || b[ve-1] == '\t') {
			ve--
		}
		if !validValueBytes(b[vs:ve]) {
			return false
		}
		hl.names[hl.n], hl.vals[hl.n] = name, [2]int{vs, ve}
		hl.n++
		pos = end + 2
	}
	return true
}

// reqScratch is an HTTP/1.1 connection's storage for the requests the
// fast path reads. The connection serves one request at a time and nothing
// keeps a request past its exchange (fast-path requests have no body, so
// no writer goroutine outlives it either), so the Request, its URL, the
// header map and the value slice are reused rather than made per request.
//
// The requests carry the connection's request context from the start
// (base, see setContext), so that the connection manager need not copy
// each one with Request.WithContext.
type reqScratch struct {
	req http.Request
	url url.URL
	hdr headerScratch
	// base is a zero Request with the context baseCtx.
	base    *http.Request
	baseCtx context.Context
	// scan checks the heads left to http.ReadRequest (headLimitReader
	// feeds it what it reads from the connection meanwhile).
	scan framingScan
}

// headerScratch is a header map and its value slice, reused.
type headerScratch struct {
	hdr  http.Header
	vals []string
}

// setContext makes ctx the context of the requests read from now on.
func (sc *reqScratch) setContext(ctx context.Context) {
	if sc.baseCtx != ctx {
		sc.base, sc.baseCtx = (&http.Request{}).WithContext(ctx), ctx
	}
}

// header builds the header map, leaving out line skip (-1: none); vals
// holds every value, one slice for all. With sc, its map and slice are
// reused.
func (hl *headLines) header(s string, skip int, sc *headerScratch) (http.Header, []string) {
	var hdr http.Header
	var vals []string
	if sc != nil && sc.hdr != nil {
		hdr = sc.hdr
		clear(hdr)
	} else {
		hdr = make(http.Header, hl.n)
	}
	if sc != nil && cap(sc.vals) >= hl.n {
		vals = sc.vals[:hl.n]
	} else {
		vals = make([]string, hl.n)
	}
	if sc != nil {
		sc.hdr, sc.vals = hdr, vals
	}
	for i, name := range hl.names[:hl.n] {
		vals[i] = s[hl.vals[i][0]:hl.vals[i][1]]
		if i == skip {
			continue
		}
		if prior, ok := hdr[name]; ok {
			hdr[name] = append(prior, vals[i])
			continue
		}
		hdr[name] = vals[i : i+1 : i+1]
	}
	return hdr, vals
}

// find returns the index of the only line named name, -1 if none, -2 if
// several.
func (hl *headLines) find(name string) int {
	at := -1
	for i, n := range hl.names[:hl.n] {
		if n == name {
			if at >= 0 {
				return -2
			}
			at = i
		}
	}
	return at
}

// parseRequestHead parses a head that ends with its blank line, or
// returns nil (see readRequestHead).
func parseRequestHead(b []byte, sc *reqScratch) *http.Request {
	lineEnd := bytes.Index(b, []byte("\r\n"))
	method, rest, ok1 := bytes.Cut(b[:lineEnd], []byte(" "))
	target, proto, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || string(proto) != "HTTP/1.1" || !validFieldNameBytes(method) ||
		string(method) == http.MethodConnect || !plainTarget(target) {
		return nil
	}
	s := string(b) // the one copy every string below shares
	var hl headLines
	if !parseHeaders(b, s, lineEnd+2, &hl, slowHeaderNames) {
		return nil
	}
	hostAt := hl.find("Host")
	if hostAt < 0 || !plainHost(s[hl.vals[hostAt][0]:hl.vals[hostAt][1]]) {
		return nil
	}
	return buildRequest(s, method, target, &hl, hostAt, sc)
}

// buildRequest makes the Request of a parsed head (s), in sc when set.
func buildRequest(s string, method, target []byte, hl *headLines, hostAt int, sc *reqScratch) *http.Request {
	tStart := len(method) + 1
	uri := s[tStart : tStart+len(target)]
	var u *url.URL
	var req *http.Request
	if sc != nil {
		u, req = &sc.url, &sc.req
	} else {
		u, req = &url.URL{}, &http.Request{}
	}
	path, query, hasQuery := cutByte(uri, '?')
	*u = url.URL{Path: path}
	if hasQuery {
		u.RawQuery = query
		u.ForceQuery = query == ""
	}
	var hs *headerScratch
	*req = http.Request{}
	if sc != nil {
		hs = &sc.hdr
		if sc.base != nil {
			*req = *sc.base // the context; every other field is zero
		}
	}
	hdr, vals := hl.header(s, hostAt, hs) // http.ReadRequest moves Host to Request.Host
	req.Method, req.URL, req.Proto, req.ProtoMajor, req.ProtoMinor = s[:len(method)], u, "HTTP/1.1", 1, 1
	req.Header, req.Body, req.Host, req.RequestURI = hdr, http.NoBody, vals[hostAt], uri
	return req
}

func cutByte(s string, c byte) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// headerName is the canonical form of the header name s[start:end]: an
// interned name, the bytes themselves when already canonical, else a new
// string; false for an invalid or long name (left to net/http).
func headerName(s string, start, end int) (string, bool) {
	raw := s[start:end]
	if len(raw) > 64 || !validFieldName(raw) {
		return "", false
	}
	var buf [64]byte
	canon := buf[:len(raw)]
	upper := true
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		} else if !upper && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		canon[i] = c
		upper = c == '-'
	}
	if n, ok := fastHeaderNames[string(canon)]; ok {
		return n, true
	}
	if string(canon) == raw {
		return raw, true
	}
	return string(canon), true
}

// plainTarget reports whether an origin-form request target is one
// net/url parses without unescaping or rejecting anything: a plain path
// (see plainPath), then optionally '?' and a query of visible ASCII
// without '#'.
func plainTarget(t []byte) bool {
	if len(t) == 0 || t[0] != '/' {
		return false
	}
	path, query, _ := bytes.Cut(t, []byte("?"))
	if !plainPath(string(path)) {
		return false
	}
	for _, c := range query {
		if c <= ' ' || c >= 0x7f || c == '#' {
			return false
		}
	}
	return true
}

func validFieldNameBytes(b []byte) bool { return validFieldName(string(b)) }

// validValueBytes reports whether a header value has no control byte
// other than tab (what textproto accepts).
func validValueBytes(b []byte) bool {
	for _, c := range b {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
