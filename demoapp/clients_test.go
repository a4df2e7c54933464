package demoapp

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// echoServer echoes on 127.0.0.1 until the test ends; with closeAfter > 0
// each connection is closed after that many echoed reads.
func echoServer(t *testing.T, closeAfter int) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				for n := 0; closeAfter == 0 || n < closeAfter; n++ {
					k, err := c.Read(buf)
					if err != nil {
						return
					}
					if _, err := c.Write(buf[:k]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

var okLine = regexp.MustCompile(`^\d+ ok$`)

func TestTCPClientHold(t *testing.T) {
	addr := echoServer(t, 0)
	var out bytes.Buffer
	start := time.Now()
	err := runTCPClient(context.Background(), []string{"-addr", addr, "-message", "hi", "-hold", "300ms", "-every", "50ms"}, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 3*time.Second {
		t.Errorf("held %s, want about 300ms", d)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 3 {
		t.Fatalf("output %q: want an ok line every 50ms", out.String())
	}
	for _, l := range lines {
		if !okLine.MatchString(l) {
			t.Fatalf("line %q, want \"<unix-ms> ok\"", l)
		}
	}
}

// The connection ending early is reported on a last "closed" line.
func TestTCPClientHoldClosed(t *testing.T) {
	addr := echoServer(t, 2)
	var out bytes.Buffer
	err := runTCPClient(context.Background(), []string{"-addr", addr, "-message", "hi", "-hold", "5s", "-every", "10ms"}, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !okLine.MatchString(lines[0]) || !okLine.MatchString(lines[1]) ||
		!regexp.MustCompile(`^\d+ closed connection closed before a reply`).MatchString(lines[2]) {
		t.Fatalf("output %q: want two ok lines and a closed one", out.String())
	}
}

// A cancelled context ends -hold at once, not after the pause.
func TestTCPClientHoldHonoursContext(t *testing.T) {
	addr := echoServer(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	err := runTCPClient(ctx, []string{"-addr", addr, "-hold", "30s", "-every", "10s"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("returned %s after the context ended at 100ms", d)
	}
}

func TestGetMany(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 2 {
			http.Error(w, "busy  now", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "hello\nworld\n")
	}))
	defer srv.Close()
	var out bytes.Buffer
	if err := runGet(context.Background(), []string{"-n", "3", srv.URL}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if want := "200 hello world\n503 busy now\n200 hello world\n"; out.String() != want {
		t.Fatalf("output %q, want %q", out.String(), want)
	}
	srv.Close()
	out.Reset()
	if err := runGet(context.Background(), []string{"-n", "2", "-every", "1ms", srv.URL}, &out, io.Discard); err != nil {
		t.Fatalf("-n with the server down: %v, want exit 0", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "error ") || !strings.HasPrefix(lines[1], "error ") {
		t.Fatalf("output %q, want two error lines", out.String())
	}
	if err := runGet(context.Background(), []string{"-n", "0", srv.URL}, io.Discard, io.Discard); err == nil {
		t.Fatal("-n 0 accepted")
	}
}

// -path /health answers the id: the path wins over the health endpoint.
func TestHelloPathHealth(t *testing.T) {
	srv := httptest.NewServer(&hello{id: "h-1", path: "/health", unhealthy: "/nonexistent"})
	defer srv.Close()
	if code, body := get(t, srv.URL+"/health"); code != 200 || body != "h-1\n" {
		t.Fatalf("GET /health = %d %q, want the id", code, body)
	}
}
