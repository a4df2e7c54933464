package command

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/envoy"
	"github.com/meshlet/meshlet/sidecar"
)

const defaultGRPCAddr = "127.0.0.1:8502"

func init() {
	register(
		&command{
			name: "connect envoy", args: "[options] [-- ENVOY ARGS]",
			synopsis: "Generate an Envoy bootstrap for a sidecar and run Envoy with it",
			help: `Builds the Envoy v3 bootstrap for a connect sidecar, like
'consul connect envoy': node ID and cluster, admin listener, a static
local_agent cluster reaching meshlet's gRPC server (a pipe for unix://
addresses), delta ADS, stats tags and the proxy's escape hatches. With
-bootstrap it prints the JSON; otherwise it execs envoy with it (handed over
in memory, never written to disk) and any arguments after --.

The proxy is found with -proxy-id, or with -sidecar-for SERVICE-ID (the
proxy whose destination service ID that is) through the connect API. The
ACL token of that look-up (-token, MESHLET_TOKEN or CONSUL_HTTP_TOKEN) is
also the x-consul-token of Envoy's xDS requests, as in Consul.`,
			example: "$ meshlet connect envoy -sidecar-for _nomad-task-8c3a...-group-web-web-8080 -bootstrap\n" +
				"$ meshlet connect envoy -proxy-id web-sidecar-proxy -grpc-addr unix:///alloc/run/meshlet_grpc.sock -- -l debug",
			run: runConnectEnvoy,
		},
		&command{
			name: "connect proxy", args: "[options]",
			synopsis: "Run meshlet's built-in sidecar proxy",
			help: `Runs the built-in proxy for a connect sidecar in the foreground. It speaks
ADS (delta by default) to meshlet's xDS server and serves what Envoy would:
mTLS public listener with ext_authz, upstream listeners, round-robin
clusters, and an admin listener with /ready, /stats, /clusters and
/config_dump in Envoy's formats.`,
			example: "$ meshlet connect proxy -sidecar-for _nomad-task-8c3a...-group-web-web-8080\n" +
				"$ meshlet connect proxy -proxy-id web-sidecar-proxy -service web -grpc-addr unix:///alloc/run/meshlet_grpc.sock",
			run: runConnectProxy,
		},
		&command{
			name: "connect sidecar", args: "[options] [-- ENVOY ARGS]", hidden: true,
			synopsis: "Internal: the injected connect-proxy task (Envoy or the built-in proxy)",
			help: `The command meshlet's connect_proxy driver runs for an injected
connect-proxy-<service> task. It picks the data plane like the client does
(agent config sidecar = auto|envoy|builtin and the envoy binary found on the
node): Envoy with the bootstrap the client wrote to the task's
secrets/envoy_bootstrap.json and any arguments after --, or the built-in
proxy. Started as root, either drops to -user (no capabilities,
no_new_privs) first; Envoy then gets an in-memory copy of the bootstrap, as
the file stays readable by root only.`,
			example: "$ meshlet connect sidecar -proxy-id ID -service web -grpc-addr unix:///alloc/run/meshlet_grpc.sock -mode auto",
			run:     runConnectSidecar,
		},
	)
}

// proxyTarget is a resolved sidecar: its ID, service and proxy config.
type proxyTarget struct {
	ID, Service string
	Config      map[string]any
}

// resolveProxy finds the proxy by -proxy-id or -sidecar-for through the
// Consul-shaped API. As in Consul, the two flags are exclusive, and a
// -sidecar-for that several proxies serve is an error naming their IDs.
func resolveProxy(addr *apiTarget, proxyID, sidecarFor string) (*proxyTarget, error) {
	switch {
	case proxyID == "" && sidecarFor == "":
		return nil, errors.New("one of -proxy-id or -sidecar-for is required")
	case proxyID != "" && sidecarFor != "":
		return nil, errors.New("-proxy-id and -sidecar-for are mutually exclusive")
	}
	client, err := consulClient(addr)
	if err != nil {
		return nil, err
	}
	names, _, err := client.Catalog().Services(nil)
	if err != nil {
		if hint := tlsHint(err, addr.Addr, "MESHLET_CONNECT_ADDR"); hint != "" {
			return nil, errors.New(hint)
		}
		return nil, fmt.Errorf("failed to list services at %s (is the agent running? set MESHLET_CONNECT_ADDR): %w", addr.Addr, err)
	}
	var found []*proxyTarget
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if !strings.HasSuffix(name, connect.ProxySuffix) {
			continue
		}
		entries, _, err := client.Catalog().Service(name, "", nil)
		if err != nil {
			return nil, fmt.Errorf("failed to read service %s: %w", name, err)
		}
		for _, e := range entries {
			p := e.ServiceProxy
			if p == nil || (proxyID != "" && e.ServiceID != proxyID) || (sidecarFor != "" && p.DestinationServiceID != sidecarFor) {
				continue
			}
			if proxyID != "" {
				return &proxyTarget{ID: e.ServiceID, Service: p.DestinationServiceName, Config: p.Config}, nil
			}
			found = append(found, &proxyTarget{ID: e.ServiceID, Service: p.DestinationServiceName, Config: p.Config})
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1:
		ids := make([]string, len(found))
		for i, f := range found {
			ids[i] = f.ID
		}
		slices.Sort(ids)
		return nil, fmt.Errorf("more than one sidecar proxy is registered for service ID %q: start with -proxy-id and one of %s",
			sidecarFor, strings.Join(ids, ", "))
	case proxyID != "":
		return nil, fmt.Errorf("no sidecar proxy with ID %q is registered", proxyID)
	}
	return nil, fmt.Errorf("no sidecar proxy is registered for service ID %q", sidecarFor)
}

func grpcAddrFlag(fs *flag.FlagSet) *string {
	def := os.Getenv("MESHLET_GRPC_ADDR")
	if def == "" {
		def = defaultGRPCAddr
	}
	return fs.String("grpc-addr", def, "meshlet's gRPC `ADDR`: host:port or unix:///path (env MESHLET_GRPC_ADDR)")
}

func runConnectEnvoy(e *env, c *command, args []string) int {
	fs := newFlags(c)
	proxyID := fs.String("proxy-id", "", "the sidecar proxy's service `ID` (Envoy node ID)")
	sidecarFor := fs.String("sidecar-for", "", "find the proxy whose destination is this service `ID`")
	bootstrap := fs.Bool("bootstrap", false, "print the bootstrap JSON instead of running Envoy")
	adminBind := fs.String("admin-bind", "localhost:19000", "`ADDR` of Envoy's admin listener")
	grpcAddr := grpcAddrFlag(fs)
	binary := fs.String("envoy-binary", "", "`PATH` of the envoy binary (default: envoy in PATH)")
	connectAddr := connectAddressFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	target, err := resolveProxy(connectAddr, *proxyID, *sidecarFor)
	if err != nil {
		return e.errorf("%v", err)
	}
	js, err := envoy.JSON(envoy.BootstrapConfig{
		ProxyID: target.ID, Cluster: target.Service, AdminBind: *adminBind, GRPCAddr: *grpcAddr,
		Token: connectAddr.secret(), ProxyConfig: target.Config,
	})
	if err != nil {
		return e.errorf("%v", err)
	}
	if *bootstrap {
		fmt.Fprintln(e.stdout, string(js))
		return exitOK
	}
	bin, err := envoy.FindBinary(*binary)
	if err != nil {
		return e.errorf("%v (try 'meshlet connect proxy' for the built-in proxy)", err)
	}
	return e.errorf("%v", envoy.Exec(bin, js, fs.Args()))
}

func runConnectProxy(e *env, c *command, args []string) int {
	fs := newFlags(c)
	proxyID := fs.String("proxy-id", "", "the sidecar proxy's service `ID` (xDS node ID)")
	sidecarFor := fs.String("sidecar-for", "", "find the proxy whose destination is this service `ID`")
	service := fs.String("service", "", "the destination service `NAME` (with -proxy-id, skips the catalog look-up)")
	adminBind := fs.String("admin-bind", sidecar.DefaultAdminBind, "`ADDR` of the admin listener")
	grpcAddr := grpcAddrFlag(fs)
	sotw := fs.Bool("sotw", false, "speak state-of-the-world xDS instead of delta")
	concurrency := fs.Int("concurrency", 0, "worker `THREADS` (GOMAXPROCS); 0: one per CPU")
	plainIO := fs.Bool("plain-io", false, "relay with plain net.Conn I/O only (the fallback data path; also "+sidecar.EnvPlainIO+"=1)")
	logLevel := fs.String("log-level", "info", "`LEVEL`: trace, debug, info, warn or error")
	connectAddr := connectAddressFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if *concurrency < 0 {
		return e.usageError(c, "-concurrency must be 0 or more")
	}
	id, svc := *proxyID, *service
	if id == "" || svc == "" {
		target, err := resolveProxy(connectAddr, id, *sidecarFor)
		if err != nil {
			return e.errorf("%v", err)
		}
		id, svc = target.ID, target.Service
	}
	cfg := sidecar.Config{ProxyID: id, Cluster: svc, XDSAddr: *grpcAddr, AdminBind: *adminBind, Delta: !*sotw, PlainIO: *plainIO}
	return e.runBuiltinProxy(cfg, *logLevel, *concurrency)
}

// runBuiltinProxy runs the built-in proxy configured by cfg until the
// command's context ends; concurrency > 0 caps the threads running Go code
// (GOMAXPROCS). The GC gets the proxy's defaults (sidecar.TuneRuntime)
// unless GOGC or GOMEMLIMIT is set.
func (e *env) runBuiltinProxy(cfg sidecar.Config, level string, concurrency int) int {
	if concurrency > 0 {
		runtime.GOMAXPROCS(concurrency)
	}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "meshlet", Level: hclog.LevelFromString(level), Output: e.stderr})
	rt := sidecar.TuneRuntime()
	cfg.Logger.Debug("runtime tuned", "gc_percent", rt.GCPercent, "memory_limit", rt.MemLimit)
	// Once configured, give back what the whole binary's package
	// initialisation left behind, which the runtime's scavenger keeps for
	// so small a heap: it lowers an idle sidecar's private memory (as the
	// executor's, ~0.8 MB); under load the heap grows back (the bench's
	// figure at 1,000 rps did not move).
	cfg.OnReady = debug.FreeOSMemory
	mode := ""
	if cfg.PlainIO {
		mode = ", plain I/O"
	}
	fmt.Fprintf(e.stdout, "==> meshlet built-in proxy for %s (%s): xDS %s, admin %s%s\n", cfg.Cluster, cfg.ProxyID, cfg.XDSAddr, cfg.AdminBind, mode)
	err := sidecar.Run(e.ctx, cfg)
	if err != nil {
		return e.errorf("built-in proxy: %v", err)
	}
	return exitOK
}
