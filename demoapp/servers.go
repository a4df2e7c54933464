package demoapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

func runEcho(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("echo", stderr)
	listen := fs.String("listen", "127.0.0.1:9090", "address to listen on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", *listen, err)
	}
	fmt.Fprintf(stdout, "echo listening on %s\n", l.Addr())
	go func() { <-ctx.Done(); l.Close() }()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("failed to accept: %w", err)
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// counter answers {"count":N,"hostname":H} and counts every request.
type counter struct {
	n        atomic.Int64
	hostname string
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.n.Add(1)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"count": n, "hostname": c.hostname})
}

func runCounting(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("counting", stderr)
	listen := fs.String("listen", "127.0.0.1:9001", "address to listen on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	host, _ := os.Hostname()
	if id := os.Getenv("NOMAD_ALLOC_ID"); id != "" {
		host = id
	}
	return serveHTTP(ctx, *listen, &counter{hostname: host}, stdout)
}

var dashboardPage = template.Must(template.New("dash").Parse(`<!doctype html>
<html><head><title>meshlet dashboard</title></head>
<body><h1>Count: {{.Count}}</h1><p>from {{.Host}} via {{.URL}}</p></body></html>
`))

// dashboard fetches the counter through its upstream on every request.
type dashboard struct {
	url    string
	client *http.Client
}

func (d *dashboard) fetch(ctx context.Context) (map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url, nil)
	if err != nil {
		return nil, fmt.Errorf("failed to build request: %w", err)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("failed to reach counting service at %s: %w", d.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("counting service answered %s", resp.Status)
	}
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("failed to decode counting answer: %w", err)
	}
	return out, nil
}

func (d *dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	got, err := d.fetch(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if r.URL.Path == "/api" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(got)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = dashboardPage.Execute(w, map[string]any{"Count": got["count"], "Host": got["hostname"], "URL": d.url})
}

func runDashboard(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("dashboard", stderr)
	listen := fs.String("listen", "127.0.0.1:9002", "address to listen on")
	url := fs.String("counting-url", "", "URL of the counting service (through the upstream)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" {
		return errors.New("-counting-url is required")
	}
	d := &dashboard{url: *url, client: upstreamClient()}
	return serveHTTP(ctx, *listen, d, stdout)
}

// hello answers path with its id; on "/" it calls its upstream and merges
// (or answers its id without one); /health is its health, unless path is
// /health.
type hello struct {
	id, path, upstream string
	// unhealthy: /health answers 503 while this file exists (a check
	// target a test can flip).
	unhealthy string
	client    *http.Client
	// anyPath answers every path but /health with the id; failEvery > 0
	// answers every failEvery-th request 503 (a flaky instance).
	anyPath   bool
	failEvery int64
	served    atomic.Int64
}

func (h *hello) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if n := h.served.Add(1); h.failEvery > 0 && r.URL.Path != "/health" && n%h.failEvery == 0 {
		http.Error(w, h.id+" flaked", http.StatusServiceUnavailable)
		return
	}
	switch {
	case h.anyPath && r.URL.Path != "/health":
		fmt.Fprintln(w, h.id)
	case r.URL.Path == h.path && h.path != "/":
		// -path first: -path /health answers the id, not the health.
		fmt.Fprintln(w, h.id)
	case r.URL.Path == "/health":
		if _, err := os.Stat(h.unhealthy); h.unhealthy != "" && err == nil {
			http.Error(w, h.id+" unhealthy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, h.id+" healthy")
	case r.URL.Path == "/" && h.upstream != "":
		resp, err := h.client.Get(h.upstream)
		if err != nil {
			http.Error(w, fmt.Sprintf("%s: upstream failed: %v", h.id, err), http.StatusInternalServerError)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		if err != nil || resp.StatusCode != http.StatusOK {
			http.Error(w, fmt.Sprintf("%s: upstream answered %s", h.id, resp.Status), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "%s <- %s\n", h.id, strings.TrimSpace(string(body)))
	case r.URL.Path == "/":
		fmt.Fprintln(w, h.id)
	default:
		http.NotFound(w, r)
	}
}

func runHello(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("hello", stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on")
	id := fs.String("id", os.Getenv("NOMAD_ALLOC_ID"), "identity to answer with")
	path := fs.String("path", "/hello", "path answered with the id")
	upstream := fs.String("upstream", "", "URL whose answer / merges into its own")
	unhealthy := fs.String("unhealthy-file", "", "GET /health answers 503 while this file exists (200 otherwise)")
	anyPath := fs.Bool("any-path", false, "answer every path but /health with the id")
	failEvery := fs.Int64("fail-every", 0, "answer every Nth request 503 (a flaky instance; 0: never)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	h := &hello{id: *id, path: *path, upstream: *upstream, unhealthy: *unhealthy, client: upstreamClient(),
		anyPath: *anyPath, failEvery: *failEvery}
	return serveHTTP(ctx, *listen, h, stdout)
}

// upstreamClient opens a new connection per request, so that a mesh that
// balances TCP connections spreads the requests over every instance.
func upstreamClient() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
}
