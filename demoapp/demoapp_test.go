package demoapp

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestDashboardReadsCounterThroughUpstream(t *testing.T) {
	counting := httptest.NewServer(&counter{hostname: "alloc-1"})
	defer counting.Close()
	dash := httptest.NewServer(&dashboard{url: counting.URL, client: counting.Client()})
	defer dash.Close()

	_, first := get(t, dash.URL+"/api")
	code, second := get(t, dash.URL+"/")
	if code != http.StatusOK || !strings.Contains(first, `"count":1`) || !strings.Contains(second, "Count: 2") {
		t.Fatalf("dashboard answers = %q then %d %q", first, code, second)
	}
	counting.Close()
	if code, body := get(t, dash.URL+"/"); code != http.StatusBadGateway || !strings.Contains(body, "failed to reach counting service") {
		t.Fatalf("with counting down: %d %q", code, body)
	}
}

func TestHelloMergesUpstream(t *testing.T) {
	b := httptest.NewServer(&hello{id: "b-1", path: "/hello_b"})
	defer b.Close()
	a := httptest.NewServer(&hello{id: "a", path: "/hello_a", upstream: b.URL + "/hello_b", client: b.Client()})
	defer a.Close()
	if code, body := get(t, a.URL+"/"); code != 200 || body != "a <- b-1\n" {
		t.Fatalf("merged answer = %d %q", code, body)
	}
	b.Close()
	if code, _ := get(t, a.URL+"/"); code != http.StatusInternalServerError {
		t.Fatalf("upstream down: status %d, want 500", code)
	}
}

func TestEchoAndTCPClient(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runEcho(ctx, []string{"-listen", addr}, io.Discard, io.Discard) }()
	defer func() { cancel(); <-done }()

	var out bytes.Buffer
	deadline := time.Now().Add(5 * time.Second)
	for {
		out.Reset()
		err = runTCPClient(context.Background(), []string{"-addr", addr, "-message", "hello world"}, &out, io.Discard)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || out.String() != "hello world\n" {
		t.Fatalf("tcp-client = %q, %v", out.String(), err)
	}
}

func TestMainUnknownApp(t *testing.T) {
	var stderr bytes.Buffer
	if code := Main([]string{"nope"}, io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), `unknown demo app "nope"`) {
		t.Fatalf("Main(nope) = %d, %q", code, stderr.String())
	}
}

func TestHelloHealthFollowsTheUnhealthyFile(t *testing.T) {
	flag := filepath.Join(t.TempDir(), "unhealthy")
	srv := httptest.NewServer(&hello{id: "b-0", unhealthy: flag})
	defer srv.Close()
	status := func() int {
		resp, err := http.Get(srv.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status(); got != http.StatusOK {
		t.Fatalf("healthy: %d", got)
	}
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := status(); got != http.StatusServiceUnavailable {
		t.Fatalf("with the file: %d, want 503", got)
	}
}

// -any-path answers every path, -fail-every flakes every Nth request, and
// get -header sends headers (seen by a real server).
func TestHelloFlakesAndGetSendsHeaders(t *testing.T) {
	h := httptest.NewServer(&hello{id: "v2", anyPath: true, failEvery: 2})
	defer h.Close()
	codes := []int{}
	for _, p := range []string{"/admin", "/x/y", "/", "/z"} {
		c, body := get(t, h.URL+p)
		codes = append(codes, c)
		if c == 200 && body != "v2\n" {
			t.Fatalf("GET %s = %q", p, body)
		}
	}
	if codes[0] != 200 || codes[1] != 503 || codes[2] != 200 || codes[3] != 503 {
		t.Fatalf("codes = %v; want every 2nd request 503", codes)
	}
	seen := make(chan string, 1)
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("X-Canary") + "|" + r.Header.Get("X-Team")
	}))
	defer echo.Close()
	var out, errOut bytes.Buffer
	if err := runGet(context.Background(), []string{"-header", "x-canary: 1", "-header", "X-Team:blue", echo.URL}, &out, &errOut); err != nil {
		t.Fatalf("get: %v (%s)", err, errOut.String())
	}
	if got := <-seen; got != "1|blue" {
		t.Fatalf("server saw headers %q", got)
	}
	if err := runGet(context.Background(), []string{"-header", "novalue", echo.URL}, &out, &errOut); err == nil {
		t.Fatal("get -header novalue succeeded; want a usage error")
	}
}
