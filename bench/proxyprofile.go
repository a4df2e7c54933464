package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/controlplane"
	"github.com/meshlet/meshlet/sidecar"
)

// profileLoad bounds the in-process HTTP load that is profiled.
const (
	profileDuration = 3 * time.Second
	profileConns    = 10
	profileMaxReqs  = 200000
)

// httpProxyProfile builds the HTTP mesh path in this process (the
// composed control plane on 127.0.0.1:0, the catalog entries the client
// would register, two built-in proxies, an app) and CPU-profiles HTTP
// requests through it: the same code the sidecar processes run.
func (r *Runner) httpProxyProfile(ctx context.Context) string {
	const what = "built-in proxy, HTTP through two sidecars (in process)"
	prof := filepath.Join(r.scratch, "http-proxy.cpu")
	n, err := r.runHTTPMesh(ctx, prof)
	if err != nil {
		return fmt.Sprintf("%s: no profile: %v", what, err)
	}
	flat, err := PprofTop(ctx, r.opts.GoBin, prof, 8, false)
	if err != nil {
		return fmt.Sprintf("%s: no profile: %v", what, err)
	}
	cum, err := PprofTop(ctx, r.opts.GoBin, prof, 80, true)
	if err != nil {
		return fmt.Sprintf("%s: no profile: %v", what, err)
	}
	return Summarize(fmt.Sprintf("%s, %d requests", what, n), flat, cum, "meshlet/meshlet/sidecar", 6)
}

// runHTTPMesh sets the mesh up, runs the profiled load and returns the
// number of requests made.
func (r *Runner) runHTTPMesh(ctx context.Context, profPath string) (int, error) {
	dir, err := os.MkdirTemp(r.scratch, "cp")
	if err != nil {
		return 0, err
	}
	cat := catalog.New()
	cp, err := controlplane.New(controlplane.Config{DataDir: dir, DefaultAllow: true, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: hclog.NewNullLogger()}, cat)
	if err != nil {
		return 0, err
	}
	defer cp.Stop() // also when Start fails: New already started the CA
	if err := cp.Start(); err != nil {
		return 0, err
	}
	app := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, `{"count":1}`) })}
	appLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	go func() { _ = app.Serve(appLn) }()
	defer app.Close()
	ports, err := freePorts(4) // server public, client public, client upstream, unused admin
	if err != nil {
		return 0, err
	}
	registerHTTPMesh(cat, appLn.Addr().(*net.TCPAddr).Port, ports)
	for _, p := range []struct{ id, svc string }{{"srv-sidecar-proxy", "bench-http"}, {"cli-sidecar-proxy", "bench-client"}} {
		cfg := sidecar.DefaultConfig(p.id, p.svc, cp.GRPCAddr())
		cfg.AdminBind = "127.0.0.1:0"
		px, err := sidecar.New(cfg)
		if err != nil {
			return 0, err
		}
		if err := px.Start(ctx); err != nil {
			return 0, err
		}
		defer px.Close()
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", ports[2])
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: profileConns}, Timeout: 5 * time.Second}
	if err := waitHTTP(ctx, client, url, 30*time.Second); err != nil {
		return 0, err
	}
	f, err := os.Create(profPath)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return 0, fmt.Errorf("failed to start the CPU profile: %w", err)
	}
	n := httpLoad(client, url, profileConns, profileDuration, profileMaxReqs)
	pprof.StopCPUProfile()
	return n, nil
}

// registerHTTPMesh registers what the client registers for the bench-http
// server (protocol http) and a client with an upstream to it.
func registerHTTPMesh(cat *catalog.Catalog, appPort int, ports []int) {
	http := map[string]any{"protocol": "http"}
	cat.Register(catalog.ServiceInstance{ID: "srv", Name: "bench-http", Address: "127.0.0.1", Port: appPort, Healthy: true, Connect: true})
	cat.Register(catalog.ServiceInstance{
		ID: "srv-sidecar-proxy", Name: "bench-http-sidecar-proxy", Kind: catalog.KindConnectProxy,
		Address: "127.0.0.1", Port: ports[0], Healthy: true,
		Proxy: &catalog.Proxy{DestinationServiceName: "bench-http", DestinationServiceID: "srv",
			LocalServiceAddress: "127.0.0.1", LocalServicePort: appPort, Config: http},
	})
	cat.Register(catalog.ServiceInstance{ID: "cli", Name: "bench-client", Address: "127.0.0.1", Port: ports[3], Healthy: true, Connect: true})
	cat.Register(catalog.ServiceInstance{
		ID: "cli-sidecar-proxy", Name: "bench-client-sidecar-proxy", Kind: catalog.KindConnectProxy,
		Address: "127.0.0.1", Port: ports[1], Healthy: true,
		Proxy: &catalog.Proxy{DestinationServiceName: "bench-client", DestinationServiceID: "cli",
			LocalServiceAddress: "127.0.0.1", LocalServicePort: ports[3],
			Upstreams: []catalog.Upstream{{DestinationName: "bench-http", LocalBindAddress: "127.0.0.1", LocalBindPort: ports[2], Config: http}}},
	})
}

// waitHTTP retries GET url until it answers 200.
func waitHTTP(ctx context.Context, c *http.Client, url string, timeout time.Duration) error {
	var last error
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		resp, err := c.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
	}
	return fmt.Errorf("no traffic through the in-process mesh after %s: %v", timeout, last)
}

// httpLoad runs GETs on conns goroutines until d passes or limit requests
// are made, and returns how many succeeded.
func httpLoad(c *http.Client, url string, conns int, d time.Duration, limit int64) int {
	var done atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && done.Load() < limit {
				resp, err := c.Get(url)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(done.Load())
}
