package checks

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// probe runs one check once; ctx carries the check's timeout.
type probe interface {
	run(ctx context.Context) (Status, string)
	close()
}

type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// newProbe builds the probe for a valid definition.
func newProbe(d Definition, dial dialFunc, exec Execer) (probe, error) {
	switch d.Type {
	case TypeHTTP:
		return newHTTPProbe(d, dial), nil
	case TypeTCP:
		return &tcpProbe{addr: target(d), dial: dial, timeout: d.timeout()}, nil
	case TypeGRPC:
		return &grpcProbe{d: d, dial: dial}, nil
	case TypeScript:
		if exec == nil {
			return nil, errors.New("script checks are not supported here: no exec")
		}
		return &scriptProbe{d: d, exec: exec}, nil
	}
	return nil, fmt.Errorf("unsupported check type %q", d.Type)
}

func target(d Definition) string {
	return net.JoinHostPort(d.Address, strconv.Itoa(d.Port))
}

// describe renders a probe's error; a deadline says how long it was.
func describe(ctx context.Context, err error, timeout time.Duration) string {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()) || status.Code(err) == codes.DeadlineExceeded {
		return fmt.Sprintf("timed out after %s", timeout)
	}
	return err.Error()
}

func truncate(b []byte) string {
	if len(b) > MaxOutput {
		b = b[:MaxOutput]
	}
	return string(b)
}

type httpProbe struct {
	d      Definition
	url    string
	method string
	client *http.Client
}

func newHTTPProbe(d Definition, dial dialFunc) *httpProbe {
	scheme := d.Protocol
	if scheme == "" {
		scheme = "http"
	}
	path := d.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	method := strings.ToUpper(d.Method)
	if method == "" {
		method = http.MethodGet
	}
	tr := &http.Transport{
		DialContext:       dial,
		DisableKeepAlives: true,
		TLSClientConfig:   tlsConfig(d),
	}
	return &httpProbe{d: d, url: scheme + "://" + target(d) + path, method: method,
		client: &http.Client{Transport: tr, Timeout: d.timeout()}}
}

// tlsConfig is the client TLS configuration of https and grpc checks: the
// check's tls_server_name and tls_skip_verify.
func tlsConfig(d Definition) *tls.Config {
	return &tls.Config{ServerName: d.TLSServerName, InsecureSkipVerify: d.TLSSkipVerify} //nolint:gosec // the check's tls_skip_verify
}

func (p *httpProbe) run(ctx context.Context) (Status, string) {
	prefix := fmt.Sprintf("HTTP %s %s", p.method, p.url)
	var body io.Reader
	if p.d.Body != "" {
		body = strings.NewReader(p.d.Body)
	}
	req, err := http.NewRequestWithContext(ctx, p.method, p.url, body)
	if err != nil {
		return StatusCritical, fmt.Sprintf("%s: %v", prefix, err)
	}
	for k, vs := range p.d.Header {
		if http.CanonicalHeaderKey(k) == "Host" {
			if len(vs) > 0 {
				req.Host = vs[0]
			}
			continue
		}
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "meshlet health check")
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "text/plain, text/*, */*")
	}
	resp, err := p.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return StatusCritical, fmt.Sprintf("%s: %s", prefix, describe(ctx, err, p.d.timeout()))
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(io.LimitReader(resp.Body, MaxOutput))
	if err != nil && len(out) == 0 {
		return StatusCritical, fmt.Sprintf("%s: %s: failed to read the body: %s", prefix, resp.Status,
			describe(ctx, err, p.d.timeout()))
	}
	output := fmt.Sprintf("%s: %s Output: %s", prefix, resp.Status, out)
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return StatusPassing, output
	case resp.StatusCode == http.StatusTooManyRequests:
		return StatusWarning, output
	}
	return StatusCritical, output
}

func (p *httpProbe) close() { p.client.CloseIdleConnections() }

type tcpProbe struct {
	addr    string
	dial    dialFunc
	timeout time.Duration
}

func (p *tcpProbe) run(ctx context.Context) (Status, string) {
	conn, err := p.dial(ctx, "tcp", p.addr)
	if err != nil {
		return StatusCritical, fmt.Sprintf("TCP connect %s: %s", p.addr, describe(ctx, err, p.timeout))
	}
	_ = conn.Close()
	return StatusPassing, fmt.Sprintf("TCP connect %s: Success", p.addr)
}

func (p *tcpProbe) close() {}

// grpcProbe asks grpc.health.v1 over a fresh connection per run, so a
// broken connection never outlives one run.
type grpcProbe struct {
	d    Definition
	dial dialFunc
}

func (p *grpcProbe) run(ctx context.Context) (Status, string) {
	name := target(p.d)
	if p.d.GRPCService != "" {
		name += "/" + p.d.GRPCService
	}
	creds := insecure.NewCredentials()
	if p.d.GRPCUseTLS {
		creds = credentials.NewTLS(tlsConfig(p.d))
	}
	// passthrough: the address goes to our dialer as is (no grpc resolver).
	conn, err := grpc.NewClient("passthrough:///"+target(p.d), grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return p.dial(ctx, "tcp", addr)
		}))
	if err != nil {
		return StatusCritical, fmt.Sprintf("gRPC check %s: %v", name, err)
	}
	defer func() { _ = conn.Close() }()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: p.d.GRPCService})
	if err != nil {
		if s, ok := status.FromError(err); ok && s.Code() != codes.DeadlineExceeded {
			return StatusCritical, fmt.Sprintf("gRPC check %s: %s: %s", name, s.Code(), s.Message())
		}
		return StatusCritical, fmt.Sprintf("gRPC check %s: %s", name, describe(ctx, err, p.d.timeout()))
	}
	out := fmt.Sprintf("gRPC check %s: %s", name, resp.GetStatus())
	if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
		return StatusPassing, out
	}
	return StatusCritical, out
}

func (p *grpcProbe) close() {}

// scriptProbe runs a command in the task: exit 0 is passing, 1 warning,
// anything else critical (Consul's convention).
type scriptProbe struct {
	d    Definition
	exec Execer
}

func (p *scriptProbe) run(ctx context.Context) (Status, string) {
	cmd := append([]string{p.d.Command}, p.d.Args...)
	out, code, err := p.exec.Exec(ctx, p.d.Task, cmd)
	if err != nil {
		return StatusCritical, fmt.Sprintf("failed to run %q in task %q: %s", p.d.Command, p.d.Task,
			describe(ctx, err, p.d.timeout()))
	}
	if ctx.Err() != nil {
		return StatusCritical, fmt.Sprintf("script %q in task %q: %s", p.d.Command, p.d.Task,
			describe(ctx, ctx.Err(), p.d.timeout()))
	}
	output := truncate(out)
	if output == "" && code != 0 {
		output = fmt.Sprintf("%s: exit code %d", p.d.Command, code)
	}
	switch code {
	case 0:
		return StatusPassing, output
	case 1:
		return StatusWarning, output
	}
	return StatusCritical, output
}

func (p *scriptProbe) close() {}
