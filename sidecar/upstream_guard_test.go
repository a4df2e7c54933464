package sidecar

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// An upstream answering 101 to a request that asked for no upgrade does
// not turn the client's connection into a raw tunnel to it (past the
// per-request routing and authorization): the client gets an error
// response, and its next request is proxied as a request.
func TestHTTPMeshUnrequestedUpgradeRefused(t *testing.T) {
	m := newHTTPMesh(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/switch" {
			// A bare 101: no Upgrade header, as none was asked for.
			conn, brw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\n\r\n")
			brw.Flush()
			io.Copy(conn, brw)
			return
		}
		io.WriteString(w, "plain")
	}))
	c, br := rawConn(t, m)
	fmt.Fprintf(c, "GET /switch HTTP/1.1\r\nHost: api\r\n\r\n")
	resp, _ := readResp(t, br, http.MethodGet)
	if resp.StatusCode < 500 {
		t.Fatalf("101 to a request without Upgrade relayed as %d, want a 5xx", resp.StatusCode)
	}
	if resp.Close {
		c, br = rawConn(t, m)
	}
	fmt.Fprintf(c, "GET /next HTTP/1.1\r\nHost: api\r\n\r\n")
	if resp, body := readResp(t, br, http.MethodGet); resp.StatusCode != http.StatusOK || body != "plain" {
		t.Fatalf("next request = %d %q, want 200 %q", resp.StatusCode, body, "plain")
	}
}

// rawUpstream accepts connections on a loopback port and runs serve on
// each (after reading nothing: serve decides).
func rawUpstream(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("failed to listen: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// An upstream sending an endless response head (one huge header, or 1xx
// heads one after another) fails the exchange once the head passes the
// limit, instead of the proxy reading (and holding) all of it.
func TestH1TransportResponseHeadLimit(t *testing.T) {
	const sent = 64 << 20
	for name, head := range map[string]func(int) string{
		"header": func(i int) string {
			if i == 0 {
				return "HTTP/1.1 200 OK\r\nX-Big: "
			}
			return strings.Repeat("a", 64<<10)
		},
		"informational": func(int) string {
			return strings.Repeat("HTTP/1.1 100 Continue\r\nX-Pad: "+strings.Repeat("p", 1000)+"\r\n\r\n", 60)
		},
	} {
		t.Run(name, func(t *testing.T) {
			wrote := make(chan int, 1)
			addr := rawUpstream(t, func(c net.Conn) {
				_, _ = http.ReadRequest(bufio.NewReader(c))
				n := 0
				for i := 0; n < sent; i++ {
					m, err := io.WriteString(c, head(i))
					n += m
					if err != nil {
						break
					}
				}
				wrote <- n
			})
			tr := newH1Transport(plainDial)
			t.Cleanup(tr.CloseIdleConnections)
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/", nil)
			if resp, err := tr.RoundTrip(req); err == nil {
				resp.Body.Close()
				t.Fatalf("an endless response head was answered %d, want an error", resp.StatusCode)
			}
			if n := <-wrote; n >= sent {
				t.Fatalf("the upstream wrote %d bytes of response head, all read: want the exchange ended near the limit", n)
			}
		})
	}
}

// Bytes an upstream sends past the end of its response (a second answer
// to one request, a body after a HEAD response's head) are not taken as
// the answer to the next request sent on that connection: the connection
// is not pooled.
func TestH1TransportUnsolicitedBytesNotPooled(t *testing.T) {
	for _, c := range []struct{ method, first string }{
		{"GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil"},
		{"HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil"},
	} {
		t.Run(c.method, func(t *testing.T) {
			var served atomic.Int64
			addr := rawUpstream(t, func(conn net.Conn) {
				br := bufio.NewReader(conn)
				for {
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					answer := "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngood"
					if served.Add(1) == 1 {
						answer = c.first
					}
					if _, err := io.WriteString(conn, answer); err != nil {
						return
					}
				}
			})
			tr := newH1Transport(plainDial)
			t.Cleanup(tr.CloseIdleConnections)
			if code, _ := do(t, tr, c.method, "http://"+addr+"/", ""); code != http.StatusOK {
				t.Fatalf("first %s = %d, want 200", c.method, code)
			}
			if code, body := do(t, tr, "GET", "http://"+addr+"/", ""); code != http.StatusOK || body != "good" {
				t.Fatalf("GET after an answer with extra bytes = %d %q, want 200 %q", code, body, "good")
			}
		})
	}
}

// "Upgrade: h2c" is not passed on (as Envoy strips it): an upstream that
// would switch to HTTP/2 on it must not get a raw connection from the
// client past per-request routing and authorization. The request goes
// upstream as a plain one.
func TestHTTPMeshH2CUpgradeStripped(t *testing.T) {
	m := newHTTPMesh(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.EqualFold(r.Header.Get("Upgrade"), "h2c") {
			conn, brw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
			brw.Flush()
			io.Copy(conn, brw)
			return
		}
		fmt.Fprintf(w, "plain settings=%q", r.Header.Get("Http2-Settings"))
	}))
	c, br := rawConn(t, m)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: api\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
	resp, body := readResp(t, br, http.MethodGet)
	if resp.StatusCode != http.StatusOK || body != `plain settings=""` {
		t.Fatalf("h2c upgrade request answered %d %q, want 200 %q", resp.StatusCode, body, `plain settings=""`)
	}
}
