package sidecar

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestReadRequestHeadMatchesNetHTTP: every head the fast path takes gives
// the Request http.ReadRequest gives and leaves the same bytes unread; a
// head it refuses is left whole for http.ReadRequest.
func TestReadRequestHeadMatchesNetHTTP(t *testing.T) {
	next := "GET /next HTTP/1.1\r\nHost: api\r\n\r\n"
	cases := []struct {
		name, in string
		fast     bool
	}{
		{"plain get", "GET /api/items?page=2 HTTP/1.1\r\nHost: api\r\nUser-Agent: bench\r\nAccept: */*\r\nX-User: alice\r\n\r\n", true},
		{"proxied", "GET /a/b.c-d_e~f HTTP/1.1\r\nHost: 127.0.0.1:9191\r\nUser-Agent: \r\nX-Forwarded-For: 10.0.0.1, 127.0.0.1\r\nX-Forwarded-Host: api\r\nX-Forwarded-Proto: http\r\n\r\n", true},
		{"lower-case and repeated names", "HEAD / HTTP/1.1\r\nhost: api\r\nx-a: 1\r\nX-A: 2\r\naccept-encoding: gzip\r\nx-custom-NAME: v\r\n\r\n", true},
		{"blanks and obs-text in values", "DELETE /x HTTP/1.1\r\nHost: api\r\nX-V: \t a b \t\r\nX-U: caf\xc3\xa9\r\nX-E:\r\n\r\n", true},
		{"force query", "GET /a? HTTP/1.1\r\nHost: api\r\n\r\n", true},
		{"odd query", "GET /a?b=%zz&c=/?d??&e=[] HTTP/1.1\r\nHost: api\r\n\r\n", true},
		{"non-canonical uncommon name", "GET / HTTP/1.1\r\nHost: api\r\nx-user: bob\r\n\r\n", true},
		{"escaped path", "GET /a%20b HTTP/1.1\r\nHost: api\r\n\r\n", false},
		{"absolute form", "GET http://api/x HTTP/1.1\r\nHost: api\r\n\r\n", false},
		{"http/1.0", "GET / HTTP/1.0\r\nHost: api\r\n\r\n", false},
		{"no host", "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", false},
		{"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", false},
		{"body", "POST / HTTP/1.1\r\nHost: api\r\nContent-Length: 3\r\n\r\nabc", false},
		{"chunked", "POST / HTTP/1.1\r\nHost: api\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false},
		{"connection close", "GET / HTTP/1.1\r\nHost: api\r\nConnection: close\r\n\r\n", false},
		{"upgrade", "GET / HTTP/1.1\r\nHost: api\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", false},
		{"expect", "GET / HTTP/1.1\r\nHost: api\r\nExpect: 100-continue\r\n\r\n", false},
		{"pragma", "GET / HTTP/1.1\r\nHost: api\r\nPragma: no-cache\r\n\r\n", false},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: api\r\nX-A: 1\r\n  2\r\n\r\n", false},
		{"space before colon", "GET / HTTP/1.1\r\nHost : api\r\n\r\n", false},
		{"control byte in value", "GET / HTTP/1.1\r\nHost: api\r\nX-A: a\x01b\r\n\r\n", false},
		{"bare LF", "GET / HTTP/1.1\nHost: api\n\n", false},
		{"connect", "CONNECT api:443 HTTP/1.1\r\nHost: api\r\n\r\n", false},
		{"bad method", "G@T / HTTP/1.1\r\nHost: api\r\n\r\n", false},
		{"host with zone", "GET / HTTP/1.1\r\nHost: [fe80::1%25eth0]\r\n\r\n", false},
		{"fragment", "GET /a#b HTTP/1.1\r\nHost: api\r\n\r\n", false},
		{"too big for the buffer", "GET / HTTP/1.1\r\nHost: api\r\nX-Big: " + strings.Repeat("a", 5000) + "\r\n\r\n", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in + next
			fastBR := bufio.NewReaderSize(strings.NewReader(in), h1BufferSize)
			got := readRequestHead(fastBR, nil)
			if (got != nil) != tc.fast {
				t.Fatalf("fast path taken = %v, want %v", got != nil, tc.fast)
			}
			if got == nil {
				rest, _ := io.ReadAll(fastBR)
				if string(rest) != in {
					t.Fatalf("a refused head was consumed: %d of %d bytes left", len(rest), len(in))
				}
				return
			}
			slowBR := bufio.NewReader(strings.NewReader(in))
			want, err := http.ReadRequest(slowBR)
			if err != nil {
				t.Fatalf("http.ReadRequest refuses what the fast path took: %v", err)
			}
			compareRequests(t, got, want)
			restFast, _ := io.ReadAll(fastBR)
			restSlow, _ := io.ReadAll(slowBR)
			if string(restFast) != string(restSlow) {
				t.Fatalf("left unread %q, net/http leaves %q", restFast, restSlow)
			}
		})
	}
}

func compareRequests(t *testing.T, got, want *http.Request) {
	t.Helper()
	type view struct {
		Method, Proto, Host, RequestURI string
		Major, Minor                    int
		URL                             any
		Header                          http.Header
		Close                           bool
		ContentLength                   int64
		TE                              []string
		Trailer                         http.Header
		NoBody                          bool
	}
	v := func(r *http.Request) view {
		return view{r.Method, r.Proto, r.Host, r.RequestURI, r.ProtoMajor, r.ProtoMinor, *r.URL, r.Header,
			r.Close, r.ContentLength, r.TransferEncoding, r.Trailer, r.Body == http.NoBody}
	}
	if g, w := v(got), v(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("fast path:\n%+v\nnet/http:\n%+v", g, w)
	}
}

// FuzzReadRequestHead: whatever the input, a head the fast path takes is
// one http.ReadRequest reads to the same Request, and a refused one is
// left whole.
func FuzzReadRequestHead(f *testing.F) {
	f.Add("GET /api/items?page=2 HTTP/1.1\r\nHost: api\r\nUser-Agent: bench\r\nX-User: alice\r\n\r\n")
	f.Add("GET / HTTP/1.1\r\nhost: a\r\nx-a: 1\r\nX-A: 2\r\n\r\nGET")
	f.Add("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nz")
	f.Fuzz(func(t *testing.T, in string) {
		br := bufio.NewReaderSize(strings.NewReader(in), h1BufferSize)
		got := readRequestHead(br, nil)
		if got == nil {
			if rest, _ := io.ReadAll(br); string(rest) != in {
				t.Fatalf("a refused head was consumed")
			}
			return
		}
		want, err := http.ReadRequest(bufio.NewReader(strings.NewReader(in)))
		if err != nil {
			t.Fatalf("fast path took %q, http.ReadRequest refuses it: %v", in, err)
		}
		compareRequests(t, got, want)
	})
}

// TestReadRequestScratchReuse: requests read one after another into the
// same scratch each look as http.ReadRequest reads them (nothing of the
// previous one left: headers, query, values).
func TestReadRequestScratchReuse(t *testing.T) {
	heads := []string{
		"GET /a?x=1 HTTP/1.1\r\nHost: api\r\nX-A: 1\r\nX-B: 2\r\nAccept: */*\r\nX-C: 3\r\nX-D: 4\r\nX-E: 5\r\nX-F: 6\r\nX-G: 7\r\nX-H: 8\r\nX-I: 9\r\n\r\n",
		"DELETE /b HTTP/1.1\r\nHost: other:81\r\nX-B: two\r\n\r\n",
		"GET /c? HTTP/1.1\r\nHost: api\r\nx-b: 3\r\nX-B: 4\r\n\r\n",
	}
	all := strings.Join(heads, "")
	br := bufio.NewReaderSize(strings.NewReader(all), h1BufferSize)
	slow := bufio.NewReader(strings.NewReader(all))
	var sc reqScratch
	for i := range heads {
		got, err := readRequest(br, &sc)
		if err != nil || got != &sc.req {
			t.Fatalf("request %d: %v (scratch used: %v)", i, err, got == &sc.req)
		}
		want, err := http.ReadRequest(slow)
		if err != nil {
			t.Fatal(err)
		}
		compareRequests(t, got, want)
		got.Header.Set("X-Added-By-Proxy", "1") // as outbound does
	}
}

// A head whose lines end with a bare LF (which net/http accepts) is read
// at once from a connection that stays open, not after the read deadline:
// the fast path must not wait for a CRLF that never comes.
func TestReadRequestBareLFOnOpenConn(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	go func() { _, _ = client.Write([]byte("GET /x HTTP/1.1\nHost: a\n\n")) }()
	type result struct {
		req *http.Request
		err error
	}
	done := make(chan result, 1)
	go func() {
		req, err := readRequest(bufio.NewReader(server), nil)
		done <- result{req, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || r.req.URL.Path != "/x" || r.req.Host != "a" {
			t.Fatalf("bare-LF head: %+v, %v", r.req, r.err)
		}
	case <-time.After(10 * time.Second):
		// The client sent the whole head and waits for an answer: a
		// reader still waiting hangs the connection until its deadline.
		t.Fatal("the reader still waits for a CRLF after the whole bare-LF head arrived")
	}
}
