package sidecar

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
)

// readResponse reads a response head: readResponseHead when it can, else
// http.ReadResponse (which then reads the same bytes, none consumed). lb
// is the connection's body reader for the fast path, xs (when set) the
// storage its response is read into.
func readResponse(br *bufio.Reader, req *http.Request, lb *lengthBody, xs *exchScratch) (*http.Response, error) {
	if resp := readResponseHead(br, req, lb, xs); resp != nil {
		return resp, nil
	}
	return http.ReadResponse(br, req)
}

// readResponseHead parses the common answer of a keep-alive upstream as
// http.ReadResponse would, with one copy of the head for every string:
// HTTP/1.1, a final status other than 204 and 304 to a request other
// than HEAD, one Content-Length and none of slowResponseHeaders, the whole
// head in br's buffer. Its body is lb, reset to the length (a connection
// carries one exchange at a time, and upstreamBody stops reading it once
// finished). With xs the Response and its header map are xs's, reused.
// Anything else, or a read error: nil, nothing consumed.
func readResponseHead(br *bufio.Reader, req *http.Request, lb *lengthBody, xs *exchScratch) *http.Response {
	if req.Method == http.MethodHead {
		return nil
	}
	head := bufferedHead(br)
	if head == nil {
		return nil
	}
	lineEnd := bytes.Index(head, []byte("\r\n"))
	line := head[:lineEnd]
	const proto = "HTTP/1.1 "
	if len(line) < len(proto)+3 || string(line[:len(proto)]) != proto || (len(line) > len(proto)+3 && line[len(proto)+3] != ' ') {
		return nil
	}
	code := 0
	for _, c := range line[len(proto) : len(proto)+3] {
		if c < '0' || c > '9' {
			return nil
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code == http.StatusNoContent || code == http.StatusNotModified || !validValueBytes(line) {
		return nil
	}
	s := string(head)
	var hl headLines
	if !parseHeaders(head, s, lineEnd+2, &hl, slowResponseHeaders) {
		return nil
	}
	clAt := hl.find("Content-Length")
	if clAt < 0 {
		return nil
	}
	length, ok := parseLength(s[hl.vals[clAt][0]:hl.vals[clAt][1]])
	if !ok {
		return nil
	}
	var hs *headerScratch
	var resp *http.Response
	if xs != nil {
		hs, resp = &xs.hdr, &xs.resp
	} else {
		resp = new(http.Response)
	}
	hdr, _ := hl.header(s, -1, hs)
	*resp = http.Response{
		Status: s[len(proto):lineEnd], StatusCode: code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: hdr, ContentLength: length, Request: req, Body: http.NoBody,
	}
	_, _ = br.Discard(len(head))
	if length > 0 {
		*lb = lengthBody{br: br, n: length}
		resp.Body = lb
	}
	return resp
}

// parseLength parses a Content-Length of digits only (net/http judges the
// rest).
func parseLength(v string) (int64, bool) {
	if v == "" || len(v) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(v[i]-'0')
	}
	return n, true
}

// lengthBody is a response body of known length read from the
// connection's buffered reader: io.EOF with its last byte, and
// io.ErrUnexpectedEOF if the connection ends first, as net/http's body.
type lengthBody struct {
	br *bufio.Reader
	n  int64
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.br.Read(p)
	b.n -= int64(n)
	switch {
	case err == io.EOF:
		return n, io.ErrUnexpectedEOF
	case err == nil && b.n == 0:
		return n, io.EOF
	}
	return n, err
}

// Close does nothing: upstreamBody decides what happens to the connection.
func (b *lengthBody) Close() error { return nil }
