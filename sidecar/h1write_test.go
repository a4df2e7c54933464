package sidecar

import (
	"bufio"
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestWriteRequestHeadMatchesNetHTTP: for every request the fast path
// takes, the bytes are exactly http.Request.Write's; the others are left
// to it (nothing written).
func TestWriteRequestHeadMatchesNetHTTP(t *testing.T) {
	mk := func(method, target, host string, hdr ...string) *http.Request {
		u, err := url.Parse(target)
		if err != nil {
			t.Fatal(err)
		}
		r := &http.Request{Method: method, URL: u, Host: host, Header: http.Header{}, Body: http.NoBody}
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header[hdr[i]] = append(r.Header[hdr[i]], hdr[i+1])
		}
		return r
	}
	cases := []struct {
		name string
		req  *http.Request
		fast bool
	}{
		{"get", mk("GET", "/api/items?page=2", "api", "User-Agent", "", "X-User", "alice", "Accept", "*/*"), true},
		{"head", mk("HEAD", "/", "api:8080", "User-Agent", "curl/8"), true},
		{"delete announces empty body", mk("DELETE", "/x", "api"), true},
		{"post announces empty body", mk("POST", "/x", "api"), true},
		{"options", mk("OPTIONS", "/x", "127.0.0.1:9"), true},
		{"no user agent key", mk("GET", "/", "api"), true},
		{"force query", mk("GET", "/a?", "api"), true},
		{"multi values", mk("GET", "/", "[::1]:80", "X-A", "1", "X-A", "2", "X-Forwarded-For", "10.0.0.1, 10.0.0.2"), true},
		{"newlines and blanks cleaned", mk("GET", "/", "api", "X-Odd", " a\r\nb\n ", "User-Agent", " ua\r\n"), true},
		{"invalid name dropped", mk("GET", "/", "api", "Bad Name", "v", "X-Ok", "1"), true},
		{"excluded fields", mk("GET", "/", "api", "Content-Length", "5", "Transfer-Encoding", "chunked", "Trailer", "X", "Host", "h"), true},
		{"escaped path", mk("GET", "/a%20b", "api"), false},
		{"question mark in path", mk("GET", "/a%3Fb", "api"), false},
		{"parens in path", mk("GET", "/a(b)", "api"), false},
		{"zone in host", mk("GET", "/", "[fe80::1%25eth0]:80"), false},
		{"empty host", mk("GET", "/", ""), false},
		{"asterisk", mk("OPTIONS", "*", "api"), false},
		{"connect", mk("CONNECT", "/", "api"), false},
		{"close", func() *http.Request { r := mk("GET", "/", "api"); r.Close = true; return r }(), false},
		{"body", func() *http.Request {
			r := mk("POST", "/", "api")
			r.Body, r.ContentLength = http.NoBody, 3
			return r
		}(), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var fast bytes.Buffer
			bw := bufio.NewWriter(&fast)
			_, ok := writeRequestHead(bw, tc.req, nil)
			_ = bw.Flush()
			if ok != tc.fast {
				t.Fatalf("fast path taken = %v, want %v", ok, tc.fast)
			}
			if !ok {
				if fast.Len() != 0 {
					t.Fatalf("fast path refused but wrote %q", fast.String())
				}
				return
			}
			var want strings.Builder
			if err := tc.req.Write(&want); err != nil {
				t.Fatalf("Request.Write: %v", err)
			}
			if fast.String() != want.String() {
				t.Fatalf("fast path wrote\n%q\nnet/http writes\n%q", fast.String(), want.String())
			}
		})
	}
}

// TestStatusLine: the reason phrase is the upstream's when its status
// starts with the code, else net/http's text for the code.
func TestStatusLine(t *testing.T) {
	cases := []struct {
		code         int
		status, want string
	}{
		{200, "200 OK", "HTTP/1.1 200 OK\r\n"},
		{404, "404 Not Found Here", "HTTP/1.1 404 Not Found Here\r\n"},
		{503, "503", "HTTP/1.1 503 Service Unavailable\r\n"},
		{503, "503 ", "HTTP/1.1 503 Service Unavailable\r\n"},
		{200, "", "HTTP/1.1 200 OK\r\n"},
		{200, "2000 odd", "HTTP/1.1 200 OK\r\n"},
		{201, "200 OK", "HTTP/1.1 201 Created\r\n"},
		{599, "599 Custom", "HTTP/1.1 599 Custom\r\n"},
	}
	for _, tc := range cases {
		var b bytes.Buffer
		bw := bufio.NewWriter(&b)
		statusLine(bw, tc.code, tc.status)
		_ = bw.Flush()
		if b.String() != tc.want {
			t.Errorf("statusLine(%d, %q) = %q, want %q", tc.code, tc.status, b.String(), tc.want)
		}
	}
}

// TestUpgradeType: an upgrade counts when "upgrade" is one of the
// Connection header's comma-separated tokens, in any of its lines.
func TestUpgradeType(t *testing.T) {
	cases := []struct {
		conn []string
		want string
	}{
		{[]string{"Upgrade"}, "websocket"},
		{[]string{"keep-alive, Upgrade"}, "websocket"},
		{[]string{"keep-alive", " upgrade "}, "websocket"},
		{[]string{"keep-alive,,UPGRADE,"}, "websocket"},
		{[]string{"keep-alive"}, ""},
		{[]string{"upgrade-insecure"}, ""},
		{nil, ""},
	}
	for _, tc := range cases {
		hd := http.Header{"Upgrade": {"websocket"}}
		if tc.conn != nil {
			hd["Connection"] = tc.conn
		}
		if got := upgradeType(hd); got != tc.want {
			t.Errorf("upgradeType(Connection: %q) = %q, want %q", tc.conn, got, tc.want)
		}
	}
}
