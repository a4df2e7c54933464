package command

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/meshlet/meshlet/agent"
)

func init() {
	register(&command{
		name: "agent", args: "[options]", synopsis: "Run the meshlet agent (server, client and mesh control plane)",
		help: `Runs the agent in the foreground until SIGINT or SIGTERM. On shutdown the
agent stops its API and runners but leaves tasks running, like Nomad: the
next agent on the same data dir recovers them. A second SIGINT or SIGTERM
during the start-up or the shutdown exits at once. SIGHUP reloads the log level from the
configuration (TLS certificates are re-read when their files change).

One of -dev, -config or -data-dir is required. -dev uses a temporary data
dir (unless -data-dir) and debug logs. Flags override the config file.
Logs go to stderr.`,
		example: "$ sudo meshlet agent -dev\n$ sudo meshlet agent -config /etc/meshlet/agent.hcl -log-level info",
		run:     runAgent,
	})
}

type agentFlags struct {
	dev             bool
	dataDir         string
	config          string
	bind            string
	logLevel        string
	server, client  bool
	servers, node   string
	join            stringList
	bootstrapExpect int
	aclEnabled      bool
}

// define adds the agent's flags to fs.
func (f *agentFlags) define(fs *flag.FlagSet) {
	fs.BoolVar(&f.dev, "dev", false, "dev mode: temporary data dir, debug logs, everything on 127.0.0.1")
	fs.StringVar(&f.dataDir, "data-dir", "", "`DIR` for state, allocations and CNI leases")
	fs.Func("config", "HCL agent configuration `FILE` (one)", func(v string) error {
		if f.config != "" {
			// Nomad merges repeated -config; taking only the last would
			// silently drop the others' settings (acl, tls...).
			return fmt.Errorf("-config is already %q: meshlet reads one config file", f.config)
		}
		f.config = v
		return nil
	})
	fs.StringVar(&f.bind, "bind", "", "`ADDR` every listener binds (default 127.0.0.1)")
	fs.StringVar(&f.logLevel, "log-level", "", "`LEVEL`: trace, debug, info, warn or error")
	fs.BoolVar(&f.server, "server", false, "run the server role (with -client: both; default without either: both)")
	fs.BoolVar(&f.client, "client", false, "run the client role")
	fs.StringVar(&f.servers, "servers", "", "comma-separated RPC `ADDRS` (host:port) of the servers a client-only agent uses")
	fs.Var(&f.join, "join", "RPC `ADDR` of a running server this server joins (repeatable)")
	fs.IntVar(&f.bootstrapExpect, "bootstrap-expect", 0, "`N` servers the cluster is meant to have")
	fs.StringVar(&f.node, "node", "", "node `NAME` (default: the host name)")
	fs.BoolVar(&f.aclEnabled, "acl-enabled", false, "require ACL tokens on the APIs (acl { enabled = true })")
}

func runAgent(e *env, c *command, args []string) int {
	fs := newFlags(c)
	var f agentFlags
	f.define(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		return e.usageError(c, "agent takes no arguments")
	}
	if !f.dev && f.config == "" && f.dataDir == "" {
		return e.usageError(c, "specify -dev, -config FILE or -data-dir DIR")
	}
	cfg, err := agentConfig(fs, f)
	if err != nil {
		return e.errorf("%v", err)
	}
	level := hclog.LevelFromString(cfg.LogLevel)
	if level == hclog.NoLevel {
		return e.errorf("invalid log level %q: want trace, debug, info, warn or error", cfg.LogLevel)
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "meshlet", Level: level, Output: e.stderr})
	a, err := agent.New(cfg, logger)
	if err != nil {
		return e.errorf("invalid agent configuration: %v", err)
	}
	if w := cfg.ACLWarning(); w != "" {
		logger.Warn(w)
	}
	// SIGHUP (a closed terminal, an operator's reload) would kill the
	// agent without a shutdown; from here on it reloads instead.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	started := make(chan error, 1)
	go func() { started <- a.Start() }()
	select {
	case err := <-started:
		if err != nil {
			return e.errorf("failed to start agent: %v", err)
		}
	case <-e.ctx.Done():
		// Start can wait a minute for servers or etcd: the signal stops
		// the agent once it has started, a second one exits at once.
		fmt.Fprintln(e.stdout, "==> Caught signal during start-up, stopping once started (signal again to exit at once)")
		sig, err := orSecondSignal(func() error { return <-started })
		if sig != nil {
			return e.errorf("caught a second signal (%v) during start-up: exiting without a clean shutdown", sig)
		}
		if err != nil {
			return e.errorf("failed to start agent: %v", err)
		}
		return shutdownAgent(e, a)
	}
	writeBanner(e.stdout, a)
	for waiting := true; waiting; {
		select {
		case <-hup:
			reloadAgent(fs, f, logger)
		case <-e.ctx.Done():
			waiting = false
		}
	}
	return shutdownAgent(e, a)
}

// reloadAgent handles SIGHUP as Nomad does: it reads the configuration
// again and applies its log level; the TLS certificate and key are re-read
// by the listeners when their files change; other settings need a restart.
func reloadAgent(fs *flag.FlagSet, f agentFlags, logger hclog.Logger) {
	cfg, err := agentConfig(fs, f)
	if err != nil {
		logger.Error("failed to reload the agent configuration; keeping the running one", "error", err)
		return
	}
	level := hclog.LevelFromString(cfg.LogLevel)
	if level == hclog.NoLevel {
		logger.Error("failed to reload the agent configuration; keeping the running one",
			"error", fmt.Sprintf("invalid log level %q", cfg.LogLevel))
		return
	}
	logger.SetLevel(level)
	logger.Info("reloaded the agent configuration: only the log level applies until a restart", "log_level", cfg.LogLevel)
}

// shutdownAgent stops the agent after the first SIGINT or SIGTERM. A
// second one exits at once (exit 1), as in Nomad, without waiting for the
// shutdown (requests in flight, alloc runners) to finish.
func shutdownAgent(e *env, a *agent.Agent) int {
	fmt.Fprintln(e.stdout, "==> Caught signal, shutting down (tasks keep running)")
	sig, err := orSecondSignal(a.Shutdown)
	switch {
	case sig != nil:
		return e.errorf("caught a second signal (%v) during shutdown: exiting without a clean shutdown", sig)
	case err != nil:
		return e.errorf("failed to shut down agent cleanly: %v", err)
	}
	fmt.Fprintln(e.stdout, "==> Agent stopped")
	return exitOK
}

// orSecondSignal runs fn, called once a first SIGINT or SIGTERM was
// delivered: it returns the next such signal if one comes before fn
// returns, else fn's error (fn then goes on in the background).
func orSecondSignal(fn func() error) (os.Signal, error) {
	// Registered after the first signal was delivered: only a new one
	// arrives here.
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(again)
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return nil, err
	case sig := <-again:
		return sig, nil
	}
}

// agentConfig builds the configuration: the file (or dev or default
// settings), then the flags that were set explicitly.
func agentConfig(fs *flag.FlagSet, f agentFlags) (*agent.Config, error) {
	var cfg *agent.Config
	switch {
	case f.config != "":
		base := agent.DefaultConfig()
		if f.dev { // as in Nomad, the file applies over dev mode's config (debug logs)
			base = agent.DevConfig()
		}
		c, err := agent.ReadConfigFileOver(f.config, base) // validated once the flags are applied
		if err != nil {
			return nil, fmt.Errorf("failed to load agent config: %w", err)
		}
		cfg = c
	case f.dev:
		cfg = agent.DevConfig()
	default:
		cfg = agent.DefaultConfig()
	}
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "dev":
			cfg.Dev = f.dev
		case "data-dir":
			cfg.DataDir = f.dataDir
		case "bind":
			cfg.BindAddr = f.bind
		case "log-level":
			cfg.LogLevel = strings.ToLower(f.logLevel)
		case "servers":
			cfg.Cluster.Servers = splitList(f.servers)
		case "join":
			cfg.Cluster.RetryJoin = f.join
		case "bootstrap-expect":
			cfg.Cluster.BootstrapExpect = f.bootstrapExpect
		case "node":
			cfg.NodeName = f.node
		case "acl-enabled":
			cfg.ACL.Enabled = f.aclEnabled
		}
	})
	if f.server || f.client {
		cfg.Cluster.Server, cfg.Cluster.Client = f.server, f.client
	}
	if err := cfg.Validate(); err != nil {
		if f.config != "" {
			return nil, fmt.Errorf("%s: %w", f.config, err)
		}
		return nil, err
	}
	return cfg, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func writeBanner(w io.Writer, a *agent.Agent) {
	cfg := a.Config()
	fmt.Fprintf(w, "==> meshlet agent started (%s)\n\n", VersionString())
	writeKV(w, [][2]string{
		{"  HTTP API", cfg.HTTPScheme() + "://" + a.HTTPAddr()},
		{"  RPC", orNone(a.RPCAddr())},
		{"  Roles", roles(cfg)},
		{"  Data Dir", cfg.DataDir},
		{"  Datacenter", cfg.Datacenter},
		{"  Region", cfg.Region},
		{"  Dev Mode", fmt.Sprint(cfg.Dev)},
		{"  Log Level", cfg.LogLevel},
	})
	fmt.Fprintf(w, "\n==> Set MESHLET_ADDR=%s://%s to use the CLI against this agent\n", cfg.HTTPScheme(), a.HTTPAddr())
	if cfg.TLS.HTTP {
		fmt.Fprintf(w, "==> and MESHLET_CACERT=%s (the HTTP APIs serve TLS)\n", cfg.TLS.CAFile)
	}
}

func roles(cfg agent.Config) string {
	switch {
	case cfg.Cluster.Server && cfg.Cluster.Client:
		return "server, client"
	case cfg.Cluster.Server:
		return "server"
	}
	return "client"
}
