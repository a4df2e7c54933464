package sidecar

import (
	"bufio"
	"errors"
	"net/http"
)

// errFramingConflict marks a request head with both Content-Length and
// Transfer-Encoding. net/http drops the Content-Length and reads the body
// chunked; a proxy before or after this one may frame it by the length
// instead (request smuggling), so it is refused with 400 and the
// connection closed, as Envoy does by default (RFC 9112 6.1: a server
// that gets both must close the connection after responding).
var errFramingConflict = errors.New("request has both Content-Length and Transfer-Encoding")

// framingScan watches the raw bytes of one request head for header lines
// named Content-Length and Transfer-Encoding (ASCII case-insensitive, as
// net/http reads names), from the request line up to the blank line. It
// sees the bytes before net/http parses them: what is buffered when the
// head is handed to http.ReadRequest, then (while active) what
// headLimitReader reads from the connection, so a head larger than the
// buffer is scanned whole, without being copied.
type framingScan struct {
	active bool // headLimitReader feeds it
	done   bool // the blank line ending the head was seen
	line   int  // index of the current line, 0 being the request line
	empty  bool // the current line has nothing but CR so far
	inName bool // the current line's bytes so far may be a header name
	name   [len("transfer-encoding")]byte
	n      int // bytes in name
	cl, te bool
}

// reset prepares the scan for the next request head.
func (s *framingScan) reset() { *s = framingScan{empty: true} }

// conflict reports whether the head had both headers.
func (s *framingScan) conflict() bool { return s.cl && s.te }

// feed scans the next bytes of the head (bytes after it are ignored).
func (s *framingScan) feed(b []byte) {
	for _, c := range b {
		if s.done {
			return
		}
		switch {
		case c == '\n':
			if s.empty && s.line > 0 {
				s.done = true
				return
			}
			s.line++
			s.empty, s.inName, s.n = true, true, 0
		case c == '\r':
		case s.line == 0 || !s.inName:
			s.empty = false
		case c == ':':
			s.empty, s.inName = false, false
			s.header(string(s.name[:s.n]))
		default:
			s.empty = false
			if s.n == len(s.name) {
				s.inName = false // longer than the names looked for
				continue
			}
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			s.name[s.n] = c
			s.n++
		}
	}
}

func (s *framingScan) header(name string) {
	switch name {
	case "content-length":
		s.cl = true
	case "transfer-encoding":
		s.te = true
	}
}

// readRequestSlow reads a request http.ReadRequest must parse, first
// scanning its head for conflicting framing headers (see framingScan):
// the part already buffered, then, through headLimitReader when it
// shares scan, the rest as net/http reads it.
func readRequestSlow(br *bufio.Reader, scan *framingScan) (*http.Request, error) {
	scan.reset()
	buffered, _ := br.Peek(br.Buffered())
	scan.feed(buffered)
	scan.active = !scan.done
	req, err := http.ReadRequest(br)
	scan.active = false
	if scan.conflict() {
		return nil, errFramingConflict
	}
	return req, err
}
