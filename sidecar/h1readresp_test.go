package sidecar

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// TestReadResponseHeadMatchesNetHTTP: every response the fast path takes
// gives the Response, body bytes and body errors http.ReadResponse gives,
// and leaves the same bytes unread; a refused one is left whole. Each case
// runs without scratch storage and with one exchScratch that every case
// reuses, as a connection does: nothing of an earlier response shows.
func TestReadResponseHeadMatchesNetHTTP(t *testing.T) {
	shared := &exchScratch{}
	for _, xs := range []*exchScratch{nil, shared} {
		testReadResponseHead(t, xs)
	}
}

func testReadResponseHead(t *testing.T, xs *exchScratch) {
	get := &http.Request{Method: http.MethodGet}
	head := &http.Request{Method: http.MethodHead}
	next := "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
	cases := []struct {
		name, in string
		req      *http.Request
		fast     bool
	}{
		{"plain", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"count\":1}", get, true},
		{"empty body", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-A: 1\r\nx-a: 2\r\n\r\n", get, true},
		{"no reason", "HTTP/1.1 503\r\nContent-Length: 2\r\nServer: x\r\n\r\nno", get, true},
		{"odd reason", "HTTP/1.1 404 Not Found Here\r\nContent-Length: 1\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\nx", get, true},
		{"truncated body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", get, true},
		{"head request", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", head, false},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n", get, false},
		{"no length", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", get, false},
		{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", get, false},
		{"signed length", "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx", get, false},
		{"connection close", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx", get, false},
		{"continue", "HTTP/1.1 100 Continue\r\n\r\n", get, false},
		{"switching", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", get, false},
		{"no content", "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", get, false},
		{"not modified", "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", get, false},
		{"http/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", get, false},
		{"two spaces", "HTTP/1.1  200 OK\r\nContent-Length: 1\r\n\r\nx", get, false},
		{"pragma", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nPragma: no-cache\r\n\r\nx", get, false},
		{"obs-fold", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nX-A: 1\r\n 2\r\n\r\nx", get, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/scratch=%v", tc.name, xs != nil), func(t *testing.T) {
			in := tc.in + next
			fastBR := bufio.NewReaderSize(strings.NewReader(in), upstreamBufferSize)
			var lb lengthBody
			got := readResponseHead(fastBR, tc.req, &lb, xs)
			if (got != nil) != tc.fast {
				t.Fatalf("fast path taken = %v, want %v", got != nil, tc.fast)
			}
			if got == nil {
				if rest, _ := io.ReadAll(fastBR); string(rest) != in {
					t.Fatalf("a refused head was consumed: %d of %d bytes left", len(rest), len(in))
				}
				return
			}
			slowBR := bufio.NewReader(strings.NewReader(in))
			want, err := http.ReadResponse(slowBR, tc.req)
			if err != nil {
				t.Fatalf("http.ReadResponse refuses what the fast path took: %v", err)
			}
			type view struct {
				Status, Proto string
				Code, Ma, Mi  int
				Header        http.Header
				Length        int64
				Close         bool
				TE            []string
				NoBody        bool
			}
			v := func(r *http.Response) view {
				return view{r.Status, r.Proto, r.StatusCode, r.ProtoMajor, r.ProtoMinor, r.Header, r.ContentLength, r.Close, r.TransferEncoding, r.Body == http.NoBody}
			}
			if g, w := v(got), v(want); !reflect.DeepEqual(g, w) {
				t.Fatalf("fast path:\n%+v\nnet/http:\n%+v", g, w)
			}
			gb, gerr := io.ReadAll(got.Body)
			wb, werr := io.ReadAll(want.Body)
			if string(gb) != string(wb) || (gerr == nil) != (werr == nil) {
				t.Fatalf("body %q (%v), net/http %q (%v)", gb, gerr, wb, werr)
			}
			if gerr == nil {
				restFast, _ := io.ReadAll(fastBR)
				restSlow, _ := io.ReadAll(slowBR)
				if string(restFast) != string(restSlow) {
					t.Fatalf("left unread %q, net/http leaves %q", restFast, restSlow)
				}
			}
		})
	}
}

// TestLengthBodyEOFWithLastByte: the body reports io.EOF together with its
// last byte, so the connection goes back to the pool without another read.
func TestLengthBodyEOFWithLastByte(t *testing.T) {
	lb := lengthBody{br: bufio.NewReader(strings.NewReader("abcdef")), n: 3}
	buf := make([]byte, 8)
	n, err := lb.Read(buf)
	if n != 3 || err != io.EOF || string(buf[:n]) != "abc" {
		t.Fatalf("Read = %d %q %v, want 3 \"abc\" EOF", n, buf[:n], err)
	}
	if n, err := lb.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("Read after the end = %d %v", n, err)
	}
}
