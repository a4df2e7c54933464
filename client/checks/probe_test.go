package checks

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func httpDef(t *testing.T, url string) Definition {
	t.Helper()
	addr := strings.TrimPrefix(strings.TrimPrefix(url, "http://"), "https://")
	h, p := hostPort(t, addr)
	return Definition{ID: "c1", Name: "web-check", ServiceID: "s1", Type: TypeHTTP, Address: h, Port: p,
		Path: "/health", Interval: time.Second, Timeout: 2 * time.Second}
}

func TestHTTPStatusCodes(t *testing.T) {
	cases := []struct {
		code int
		want Status
	}{
		{200, StatusPassing},
		{204, StatusPassing},
		{299, StatusPassing},
		{429, StatusWarning},
		{300, StatusCritical},
		{404, StatusCritical},
		{500, StatusCritical},
		{503, StatusCritical},
	}
	for _, tc := range cases {
		t.Run(http.StatusText(tc.code), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/health" {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(tc.code)
				_, _ = io.WriteString(w, "body-text")
			}))
			defer srv.Close()
			st, out := runProbe(t, httpDef(t, srv.URL), nil)
			if st != tc.want {
				t.Fatalf("code %d: status %s, want %s (output %q)", tc.code, st, tc.want, out)
			}
			if tc.code != 204 && !strings.Contains(out, "body-text") {
				t.Fatalf("output %q lacks the body", out)
			}
			if !strings.HasPrefix(out, "HTTP GET "+srv.URL+"/health: ") {
				t.Fatalf("output %q lacks the request line", out)
			}
		})
	}
}

func TestHTTPSendsMethodHeadersBody(t *testing.T) {
	type seen struct {
		method, path, query, host, body string
		header                          http.Header
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, string(b), r.Header.Clone()}
	}))
	defer srv.Close()
	d := httpDef(t, srv.URL)
	d.Method = "post"
	d.Path = "/v1/ready?deep=1"
	d.Body = `{"ping":true}`
	d.Header = map[string][]string{"X-Token": {"a", "b"}, "Content-Type": {"application/json"}, "Host": {"app.internal"}}
	if st, out := runProbe(t, d, nil); st != StatusPassing {
		t.Fatalf("status %s (%s)", st, out)
	}
	s := <-got
	if s.method != http.MethodPost || s.path != "/v1/ready" || s.query != "deep=1" || s.body != d.Body {
		t.Fatalf("request %+v", s)
	}
	if s.host != "app.internal" {
		t.Fatalf("host %q, want app.internal", s.host)
	}
	if v := s.header.Values("X-Token"); len(v) != 2 || v[0] != "a" || v[1] != "b" {
		t.Fatalf("X-Token %v", v)
	}
	if s.header.Get("Content-Type") != "application/json" || s.header.Get("User-Agent") == "" {
		t.Fatalf("headers %v", s.header)
	}
}

func TestHTTPTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer srv.Close()
	d := httpDef(t, srv.URL)
	d.Timeout = 150 * time.Millisecond
	start := time.Now()
	st, out := runProbe(t, d, nil)
	if st != StatusCritical || !strings.Contains(out, "timed out after 150ms") {
		t.Fatalf("status %s output %q, want critical timed out", st, out)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("took %s", el)
	}
}

func TestHTTPBodyTruncated(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("x", 3*MaxOutput))
	}))
	defer srv.Close()
	_, out := runProbe(t, httpDef(t, srv.URL), nil)
	if n := strings.Count(out, "x"); n != MaxOutput {
		t.Fatalf("output keeps %d bytes of the body, want %d", n, MaxOutput)
	}
}

func TestHTTPS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the failed handshake is expected
	srv.StartTLS()
	defer srv.Close()
	d := httpDef(t, srv.URL)
	d.Protocol = "https"
	if st, out := runProbe(t, d, nil); st != StatusCritical || !strings.Contains(out, "certificate") {
		t.Fatalf("without skip verify: %s %q, want critical certificate error", st, out)
	}
	d.TLSSkipVerify = true
	if st, out := runProbe(t, d, nil); st != StatusPassing {
		t.Fatalf("with skip verify: %s %q", st, out)
	}
}

func TestHTTPRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	d := httpDef(t, srv.URL)
	srv.Close()
	if st, out := runProbe(t, d, nil); st != StatusCritical || !strings.Contains(out, "refused") {
		t.Fatalf("%s %q, want critical connection refused", st, out)
	}
}

func TestTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, p := hostPort(t, l.Addr().String())
	d := Definition{ID: "t", Type: TypeTCP, Address: h, Port: p, Timeout: time.Second}
	if st, out := runProbe(t, d, nil); st != StatusPassing || !strings.Contains(out, "Success") {
		t.Fatalf("listening: %s %q", st, out)
	}
	_ = l.Close()
	if st, out := runProbe(t, d, nil); st != StatusCritical || !strings.Contains(out, "refused") {
		t.Fatalf("closed: %s %q", st, out)
	}
}

func TestScript(t *testing.T) {
	cases := []struct {
		name string
		fn   func(ctx context.Context, n int) ([]byte, int, error)
		want Status
		out  string
	}{
		{"exit0", func(context.Context, int) ([]byte, int, error) { return []byte("all good"), 0, nil }, StatusPassing, "all good"},
		{"exit1", func(context.Context, int) ([]byte, int, error) { return []byte("degraded"), 1, nil }, StatusWarning, "degraded"},
		{"exit2", func(context.Context, int) ([]byte, int, error) { return []byte("down"), 2, nil }, StatusCritical, "down"},
		{"exit3-silent", func(context.Context, int) ([]byte, int, error) { return nil, 3, nil }, StatusCritical, "exit code 3"},
		{"exec-error", func(context.Context, int) ([]byte, int, error) { return nil, 0, errors.New("no such task") },
			StatusCritical, "no such task"},
		{"timeout", func(ctx context.Context, _ int) ([]byte, int, error) { <-ctx.Done(); return nil, 0, ctx.Err() },
			StatusCritical, "timed out after 100ms"},
		{"long", func(context.Context, int) ([]byte, int, error) { return []byte(strings.Repeat("y", 9000)), 0, nil },
			StatusPassing, strings.Repeat("y", MaxOutput)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ex := &fakeExec{fn: tc.fn}
			d := Definition{ID: "s", Type: TypeScript, Command: "/bin/check", Args: []string{"-v", "x"}, Task: "web",
				Timeout: 100 * time.Millisecond}
			st, out := runProbe(t, d, ex)
			if st != tc.want || !strings.Contains(out, tc.out) || len(out) > MaxOutput+200 {
				t.Fatalf("status %s output %.100q; want %s containing %.40q", st, out, tc.want, tc.out)
			}
			if len(ex.calls) != 1 || strings.Join(ex.calls[0], " ") != "/bin/check -v x" || ex.tasks[0] != "web" {
				t.Fatalf("exec calls %v in %v", ex.calls, ex.tasks)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := Definition{ID: "a", Type: TypeTCP, Address: "127.0.0.1", Port: 80}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	// A group check without a task restarts the allocation's main tasks.
	groupRestart := ok
	groupRestart.CheckRestart = &CheckRestart{Limit: 1}
	if err := groupRestart.Validate(); err != nil {
		t.Fatalf("check_restart without a task: %v", err)
	}
	bad := map[string]Definition{
		"no id":            {Type: TypeTCP, Address: "127.0.0.1", Port: 80},
		"type":             {ID: "a", Type: "docker"},
		"no port":          {ID: "a", Type: TypeHTTP, Address: "127.0.0.1"},
		"protocol":         {ID: "a", Type: TypeHTTP, Address: "127.0.0.1", Port: 80, Protocol: "ftp"},
		"script no task":   {ID: "a", Type: TypeScript, Command: "x"},
		"script no cmd":    {ID: "a", Type: TypeScript, Task: "t"},
		"initial":          {ID: "a", Type: TypeTCP, Address: "127.0.0.1", Port: 80, InitialStatus: "ok"},
		"negative timeout": {ID: "a", Type: TypeTCP, Address: "127.0.0.1", Port: 80, Timeout: -1},
		"negative warning": {ID: "a", Type: TypeTCP, Address: "127.0.0.1", Port: 80, FailuresBeforeWarning: -1},
	}
	for name, d := range bad {
		if err := d.Validate(); !errors.Is(err, ErrInvalidCheck) {
			t.Errorf("%s: Validate = %v, want ErrInvalidCheck", name, err)
		}
	}
}

func TestDefaults(t *testing.T) {
	d := Definition{}
	if d.interval() != DefaultInterval || d.timeout() != 5*time.Second || d.StartingStatus() != StatusCritical {
		t.Fatalf("defaults: %s %s %s", d.interval(), d.timeout(), d.StartingStatus())
	}
	d.Interval = time.Second
	if d.timeout() != time.Second {
		t.Fatalf("timeout %s, want the interval", d.timeout())
	}
}

// sniRecorder returns a TLS config that serves cert and records the
// server names clients send.
func sniRecorder(cert tls.Certificate, got chan<- string) *tls.Config {
	return &tls.Config{GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		select {
		case got <- hello.ServerName:
		default:
		}
		return &cert, nil
	}}
}

// tls_server_name is the name an https check sends (SNI) and verifies.
func TestHTTPSServerName(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.TLS = sniRecorder(selfSigned(t), got)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	d := httpDef(t, srv.URL)
	d.Protocol, d.TLSSkipVerify, d.TLSServerName = "https", true, "web.internal"
	if st, out := runProbe(t, d, nil); st != StatusPassing {
		t.Fatalf("https check: %s %q", st, out)
	}
	if name := <-got; name != "web.internal" {
		t.Fatalf("server name sent %q, want web.internal", name)
	}
	// Verified against the name, not the address: the certificate is for
	// 127.0.0.1 only.
	d.TLSSkipVerify = false
	if st, out := runProbe(t, d, nil); st != StatusCritical || !strings.Contains(out, "web.internal") {
		t.Fatalf("verifying web.internal against a 127.0.0.1 certificate: %s %q", st, out)
	}
}
