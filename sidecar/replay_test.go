package sidecar

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
)

// hitCounter counts the requests an app received per method and header.
type hitCounter struct {
	mu   sync.Mutex
	hits map[string]int
}

func (h *hitCounter) add(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hits == nil {
		h.hits = map[string]int{}
	}
	h.hits[key]++
}

func (h *hitCounter) get(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hits[key]
}

// closingApp answers /warm and closes the connection without answering
// any other request, counting those by method and Idempotency-Key.
func closingApp(hits *hitCounter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/warm" {
			io.WriteString(w, "ok")
			return
		}
		hits.add(r.Method + " " + r.Header.Get("Idempotency-Key"))
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	})
}

// Through web -> (mTLS) -> api: a request the app receives on a pooled
// connection and then closes without answering is sent again on a new
// connection only under net/http's rule. A body-less POST reaches the app
// exactly once and the client gets 503; a GET, or a POST with an
// Idempotency-Key, is retried (and fails again here).
func TestHTTPMeshReplaysOnlyIdempotentRequests(t *testing.T) {
	hits := &hitCounter{}
	m := newHTTPMesh(t, closingApp(hits))
	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	send := func(method, path, key string) int {
		t.Helper()
		req, err := http.NewRequest(method, m.webURL()+path, nil)
		if err != nil {
			t.Fatalf("bad request: %v", err)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s /%s: %v", method, path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	cases := []struct {
		method, key string
		want        int
	}{
		{"POST", "", 1},
		{"PUT", "", 1},
		{"GET", "", 2},
		{"POST", "k-1", 2},
	}
	for _, tc := range cases {
		// Pool api's connection to the app, so the request goes out on
		// a reused connection.
		if code := send("GET", "warm", ""); code != http.StatusOK {
			t.Fatalf("GET /warm = %d", code)
		}
		code := send(tc.method, "close", tc.key)
		if code != http.StatusServiceUnavailable && code != http.StatusBadGateway {
			t.Errorf("%s (Idempotency-Key %q) to an app that closes = %d, want 503 or 502", tc.method, tc.key, code)
		}
		if got := hits.get(tc.method + " " + tc.key); got != tc.want {
			t.Errorf("%s (Idempotency-Key %q) reached the app %d times, want %d", tc.method, tc.key, got, tc.want)
		}
	}
}

// holdingServer is a raw HTTP/1.1 server on 127.0.0.1 that counts the
// request heads it reads by method and answers each with 200. When a
// client shuts its side for writing, the server keeps the connection open
// (it never closes first) until the test ends.
func holdingServer(t *testing.T) (string, *hitCounter) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("failed to listen: %v", err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		close(done)
		wg.Wait()
	})
	hits := &hitCounter{}
	serve := func(c net.Conn) {
		defer wg.Done()
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				<-done
				return
			}
			hits.add(req.Method)
			_, _ = io.Copy(io.Discard, req.Body)
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go serve(c)
		}
	}()
	return ln.Addr().String(), hits
}

// A POST whose pooled connection fails before a byte of it was written is
// sent on a new connection (nothing reached the upstream), and reaches the
// upstream once.
func TestH1TransportRetriesWhenNothingWritten(t *testing.T) {
	addr, hits := holdingServer(t)
	tr := newH1Transport(plainDial)
	t.Cleanup(tr.CloseIdleConnections)
	if code, body := do(t, tr, "GET", "http://"+addr+"/", ""); code != 200 || body != "ok" {
		t.Fatalf("GET = %d %q", code, body)
	}
	// Shut our side of the pooled connection for writing: the upstream
	// keeps its side open, so the connection looks alive, but the next
	// write fails with nothing written.
	tr.mu.Lock()
	var pooled net.Conn
	for _, list := range tr.idle {
		pooled = list[0].conn
	}
	tr.mu.Unlock()
	if err := pooled.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatalf("failed to shut the pooled connection for writing: %v", err)
	}
	req, _ := http.NewRequestWithContext(context.Background(), "POST", "http://"+addr+"/", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("POST on a connection that cannot write: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || hits.get("POST") != 1 {
		t.Fatalf("POST = %d, reached the upstream %d times; want 200, once", resp.StatusCode, hits.get("POST"))
	}
}
