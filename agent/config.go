package agent

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/meshlet/meshlet/cni"
	"github.com/meshlet/meshlet/connect"
)

// Default ports, as Nomad's and Consul's.
const (
	DefaultHTTPPort        = 4646
	DefaultConnectHTTPPort = 8500
	DefaultGRPCPort        = 8502
)

// Sidecar proxy choices.
const (
	SidecarAuto    = "auto"
	SidecarEnvoy   = "envoy"
	SidecarBuiltin = "builtin"
)

// Config is the agent's configuration.
type Config struct {
	// DataDir holds server/state.db, client/state.db, alloc/ and cni/.
	// Empty in dev mode: a temporary directory is created at Start.
	DataDir string
	// BindAddr is the address every listener binds; default 127.0.0.1.
	BindAddr string
	// Ports: 0 picks a free port (tests use 0).
	Ports      Ports
	Datacenter string
	Region     string
	NodeName   string
	// PluginDir holds external task driver plugins.
	PluginDir string
	// Plugins are the plugin "NAME" blocks by name (see PluginConfig).
	Plugins  map[string]PluginConfig
	Client   ClientConfig
	LogLevel string
	Dev      bool
	// Sidecar is "auto", "envoy" or "builtin".
	Sidecar     string
	EnvoyBinary string
	// ExecutorCmd overrides the drivers' executor command (tests re-exec
	// their own binary); nil = [os.Executable(), "executor"].
	ExecutorCmd []string
	// BinaryPath overrides the meshlet.binary node attribute; empty = the
	// running executable.
	BinaryPath string
	// Connect configures the embedded control plane.
	Connect ConnectConfig
	// HTTPAPI hardens the HTTP APIs against browser pages.
	HTTPAPI HTTPAPIConfig
	// Server bounds the server role's state and what a job may ask for.
	Server ServerConfig
	// Cluster selects the roles and how agents find each other; TLS
	// secures the RPC port.
	Cluster ClusterConfig
	TLS     TLSConfig
	// ACL is the acl block: whether API requests need a token.
	ACL ACLConfig
}

// HTTPAPIConfig says which browser-visible names and origins the HTTP APIs
// (Nomad's on ports.http, Consul's on ports.connect_http) accept; see
// docs/security.md. Loopback names and addresses, bind_addr, node_name and
// the host name are always accepted as Host.
type HTTPAPIConfig struct {
	// AllowedHosts are extra names or addresses (no port) a request's Host
	// may carry, e.g. a DNS name operators use for this node.
	AllowedHosts []string
	// AllowedOrigins are web origins ("https://ui.example:8443") whose
	// pages may call the APIs; none by default.
	AllowedOrigins []string
}

// ConnectConfig configures the mesh control plane.
type ConnectConfig struct {
	// DefaultIntentionPolicy decides connections no intention matches:
	// "allow" (the default, as Consul without ACLs) or "deny".
	DefaultIntentionPolicy string
	// LeafTTL is the lifetime of service leaf certificates (default 72h).
	LeafTTL time.Duration
	// MaxAPILeaves caps the leaves minted only for API callers of
	// /v1/agent/connect/ca/leaf (default 1024); LeafIdleTTL releases such a
	// leaf nobody asked for that long (default 72h). Zero: the defaults.
	MaxAPILeaves int
	LeafIdleTTL  time.Duration
	// SidecarDriver and SidecarImage choose the injected sidecar task's
	// driver on a server (connect.Options): "connect_proxy" (the default;
	// "" too) or "docker", running SidecarImage (default
	// connect.DefaultSidecarImage) with the Envoy bootstrap the client
	// writes. A service's sidecar_task driver still wins.
	SidecarDriver string
	SidecarImage  string
}

// injectOptions are the servers' sidecar injection options.
func (c ConnectConfig) injectOptions() connect.Options {
	return connect.Options{SidecarDriver: c.SidecarDriver, SidecarImage: c.SidecarImage}
}

// Ports are the agent's listener ports.
type Ports struct {
	HTTP        int
	ConnectHTTP int
	GRPC        int
	// EtcdClient and EtcdPeer are the embedded etcd member's ports on
	// 127.0.0.1; 0 (the default) picks free ones at each start.
	EtcdClient int
	EtcdPeer   int
	// RPC is where servers serve client nodes and each other (4647).
	RPC int
}

// ClientConfig configures the client role.
type ClientConfig struct {
	CNIPath             string
	CNIConfigDir        string
	BridgeNetworkSubnet string
	BridgeNetworkName   string
	MinDynamicPort      int
	MaxDynamicPort      int
	// Options: "driver.raw_exec.enable" (default false, true in dev mode;
	// a plugin "raw_exec" block wins), "driver.exec.enable" (default true).
	Options map[string]string
	Meta    map[string]string
	// ReservedPorts are host ports no job may take, in Nomad's
	// reserved { reserved_ports = "22,80,8000-8100" } syntax. The agent's
	// own ports are always reserved too.
	ReservedPorts string
	// ReservedCPU (MHz), ReservedMemoryMB and ReservedDiskMB are kept for
	// the OS and the agent (reserved { cpu memory disk }): the scheduler
	// places allocations only in what the node has beyond them.
	ReservedCPU, ReservedMemoryMB, ReservedDiskMB int
	// GCInterval, GCMaxAllocs and GCAllocTTL bound the terminal
	// allocations (runner, alloc dir, logs) the client keeps; zero means
	// the client's defaults (1m, 50, 1h). Nomad's gc_interval and
	// gc_max_allocs, plus gc_alloc_ttl.
	GCInterval  time.Duration
	GCMaxAllocs int
	GCAllocTTL  time.Duration
	// GCDiskUsageThreshold (percent, Nomad's gc_disk_usage_threshold):
	// over it every terminal allocation is collected; zero: 80.
	GCDiskUsageThreshold float64
	// ChrootEnv (Nomad's chroot_env) maps host paths to paths inside exec
	// tasks' roots, bound read-only; empty means the exec driver's default
	// (/bin /etc /lib /lib32 /lib64 /sbin /usr). Both sides absolute; a
	// missing host path is skipped; no entry may overlap data_dir.
	ChrootEnv map[string]string
	// MaxKillTimeout caps every task's kill_timeout (Nomad's
	// max_kill_timeout); zero: the client's default, 30 s.
	MaxKillTimeout time.Duration
}

// DefaultConfig returns the defaults every configuration starts from.
func DefaultConfig() *Config {
	return &Config{
		BindAddr:   "127.0.0.1",
		Ports:      Ports{HTTP: DefaultHTTPPort, ConnectHTTP: DefaultConnectHTTPPort, GRPC: DefaultGRPCPort, RPC: DefaultRPCPort},
		Cluster:    ClusterConfig{Server: true, Client: true},
		Datacenter: "dc1",
		Region:     "global",
		LogLevel:   "info",
		Sidecar:    SidecarAuto,
		Connect:    ConnectConfig{DefaultIntentionPolicy: "allow"},
		ACL:        ACLConfig{TokenTTL: DefaultACLTokenTTL},
		Client: ClientConfig{
			CNIPath:             defaultCNIPath(),
			CNIConfigDir:        cni.DefaultConfigDir,
			BridgeNetworkSubnet: cni.DefaultSubnet,
			BridgeNetworkName:   cni.DefaultNetworkName,
			MinDynamicPort:      20000,
			MaxDynamicPort:      32000,
			Options:             map[string]string{},
		},
	}
}

// DevConfig returns a dev-mode configuration: everything on 127.0.0.1, a
// temporary data dir (unless DataDir is set before Start), raw_exec enabled
// (as Nomad's -dev; outside dev mode it needs plugin "raw_exec").
func DevConfig() *Config {
	c := DefaultConfig()
	c.Dev = true
	c.LogLevel = "debug"
	return c
}

// defaultCNIPath is <dir of the meshlet binary>/cni when it exists (make
// puts the plugins in bin/cni next to bin/meshlet), else cni.DefaultPluginDir.
func defaultCNIPath() string {
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Join(filepath.Dir(exe), "cni")
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return dir
		}
	}
	return cni.DefaultPluginDir
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	var problems []string
	if net.ParseIP(c.BindAddr) == nil {
		problems = append(problems, fmt.Sprintf("bind_addr %q is not an IP address", c.BindAddr))
	}
	for name, p := range map[string]int{"http": c.Ports.HTTP, "connect_http": c.Ports.ConnectHTTP, "grpc": c.Ports.GRPC,
		"etcd_client": c.Ports.EtcdClient, "etcd_peer": c.Ports.EtcdPeer} {
		if p < 0 || p > 65535 {
			problems = append(problems, fmt.Sprintf("ports.%s %d is out of range 0-65535", name, p))
		}
	}
	if c.Client.MinDynamicPort < 1 || c.Client.MaxDynamicPort > 65535 || c.Client.MinDynamicPort > c.Client.MaxDynamicPort {
		problems = append(problems, fmt.Sprintf("dynamic port range %d-%d is invalid", c.Client.MinDynamicPort, c.Client.MaxDynamicPort))
	} else {
		problems = append(problems, c.reservedPortProblems()...)
	}
	if c.Client.ReservedCPU < 0 || c.Client.ReservedMemoryMB < 0 || c.Client.ReservedDiskMB < 0 {
		problems = append(problems, "client.reserved cpu, memory and disk must not be negative")
	}
	if c.Client.GCInterval < 0 || c.Client.GCAllocTTL < 0 || c.Client.GCMaxAllocs < 0 || c.Client.MaxKillTimeout < 0 {
		problems = append(problems, "client.gc_interval, gc_alloc_ttl, max_kill_timeout and gc_max_allocs must not be negative")
	}
	if c.Client.GCDiskUsageThreshold < 0 || c.Client.GCDiskUsageThreshold > 100 {
		problems = append(problems, fmt.Sprintf("client.gc_disk_usage_threshold %v must be a percentage (0 to 100)", c.Client.GCDiskUsageThreshold))
	}
	if _, _, err := net.ParseCIDR(c.Client.BridgeNetworkSubnet); err != nil {
		problems = append(problems, fmt.Sprintf("bridge_network_subnet %q is not a CIDR", c.Client.BridgeNetworkSubnet))
	}
	switch c.Sidecar {
	case SidecarAuto, SidecarEnvoy, SidecarBuiltin:
	default:
		problems = append(problems, fmt.Sprintf("sidecar %q must be auto, envoy or builtin", c.Sidecar))
	}
	switch c.Connect.DefaultIntentionPolicy {
	case "allow", "deny":
	default:
		problems = append(problems, fmt.Sprintf("connect.default_intention_policy %q must be allow or deny", c.Connect.DefaultIntentionPolicy))
	}
	if c.Connect.LeafTTL < 0 || c.Connect.LeafIdleTTL < 0 || c.Connect.MaxAPILeaves < 0 {
		problems = append(problems, "connect.leaf_ttl, leaf_idle_ttl and max_api_leaves must not be negative")
	}
	if err := c.Connect.injectOptions().Validate(); err != nil {
		problems = append(problems, fmt.Sprintf("connect.sidecar_driver %q must be %s or %s", c.Connect.SidecarDriver, connect.SidecarDriverProxy, connect.SidecarDriverDocker))
	}
	problems = append(problems, c.originProblems()...)
	problems = append(problems, c.Server.problems()...)
	problems = append(problems, c.clusterProblems()...)
	problems = append(problems, c.ACL.problems()...)
	problems = append(problems, c.execProblems()...)
	if !c.Dev && c.DataDir == "" {
		problems = append(problems, "data_dir is required outside dev mode")
	}
	if len(problems) > 0 {
		return fmt.Errorf("invalid agent configuration: %s", strings.Join(problems, "; "))
	}
	return nil
}

// fileConfig is the HCL shape of an agent config file; pointers tell
// "unset" (keep the default) from zero.
type fileConfig struct {
	DataDir     *string       `hcl:"data_dir"`
	BindAddr    *string       `hcl:"bind_addr"`
	Ports       *filePorts    `hcl:"ports,block"`
	Datacenter  *string       `hcl:"datacenter"`
	Region      *string       `hcl:"region"`
	NodeName    *string       `hcl:"node_name"`
	PluginDir   *string       `hcl:"plugin_dir"`
	Plugins     []*filePlugin `hcl:"plugin,block"`
	Client      *fileClient   `hcl:"client,block"`
	LogLevel    *string       `hcl:"log_level"`
	Dev         *bool         `hcl:"dev"`
	Sidecar     *string       `hcl:"sidecar"`
	EnvoyBinary *string       `hcl:"envoy_binary"`
	Connect     *fileConnect  `hcl:"connect,block"`
	HTTPAPI     *fileHTTPAPI  `hcl:"http_api,block"`
	Server      *fileServer   `hcl:"server,block"`
	TLS         *fileTLS      `hcl:"tls,block"`
	ACL         *fileACL      `hcl:"acl,block"`
}

type fileHTTPAPI struct {
	AllowedHosts   []string `hcl:"allowed_hosts,optional"`
	AllowedOrigins []string `hcl:"allowed_origins,optional"`
}

type fileReserved struct {
	ReservedPorts *string `hcl:"reserved_ports"`
	CPU           *int    `hcl:"cpu"`
	MemoryMB      *int    `hcl:"memory"`
	DiskMB        *int    `hcl:"disk"`
}

type fileConnect struct {
	DefaultIntentionPolicy *string        `hcl:"default_intention_policy"`
	LeafTTL                *hcl.Attribute `hcl:"leaf_ttl"`
	MaxAPILeaves           *int           `hcl:"max_api_leaves"`
	LeafIdleTTL            *hcl.Attribute `hcl:"leaf_idle_ttl"`
	SidecarDriver          *string        `hcl:"sidecar_driver"`
	SidecarImage           *string        `hcl:"sidecar_image"`
}

type filePorts struct {
	HTTP        *int `hcl:"http"`
	ConnectHTTP *int `hcl:"connect_http"`
	GRPC        *int `hcl:"grpc"`
	EtcdClient  *int `hcl:"etcd_client"`
	EtcdPeer    *int `hcl:"etcd_peer"`
	RPC         *int `hcl:"rpc"`
}

type fileClient struct {
	CNIPath             *string           `hcl:"cni_path"`
	CNIConfigDir        *string           `hcl:"cni_config_dir"`
	BridgeNetworkSubnet *string           `hcl:"bridge_network_subnet"`
	BridgeNetworkName   *string           `hcl:"bridge_network_name"`
	MinDynamicPort      *int              `hcl:"min_dynamic_port"`
	MaxDynamicPort      *int              `hcl:"max_dynamic_port"`
	Options             map[string]string `hcl:"options,optional"`
	Meta                map[string]string `hcl:"meta,optional"`
	Reserved            *fileReserved     `hcl:"reserved,block"`
	GCInterval          *hcl.Attribute    `hcl:"gc_interval"`
	GCMaxAllocs         *int              `hcl:"gc_max_allocs"`
	GCAllocTTL          *hcl.Attribute    `hcl:"gc_alloc_ttl"`
	MaxKillTimeout      *hcl.Attribute    `hcl:"max_kill_timeout"`
	GCDiskUsage         *float64          `hcl:"gc_disk_usage_threshold"`
	Enabled             *bool             `hcl:"enabled"`
	Servers             []string          `hcl:"servers,optional"`
	ChrootEnv           *hcl.Attribute    `hcl:"chroot_env"`
}

// LoadConfigFile reads an HCL agent configuration over the defaults and
// validates it. Unknown keys and bad values are errors with file:line:col.
func LoadConfigFile(path string) (*Config, error) {
	c, err := ReadConfigFile(path)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ReadConfigFile is LoadConfigFile without the final Validate, for callers
// that complete the file first (the agent command's flags override it, so
// a file may leave data_dir to -data-dir); they must call Validate.
// Syntax, unknown keys and malformed values are still errors.
func ReadConfigFile(path string) (*Config, error) {
	return ReadConfigFileOver(path, DefaultConfig())
}

// ReadConfigFileOver is ReadConfigFile with the file applied over base
// instead of the defaults: the agent command's -dev reads its file over
// DevConfig, as Nomad merges its files over its dev config, so the file's
// log_level (when it sets one) wins over dev mode's debug.
func ReadConfigFileOver(path string, base *Config) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read agent config: %w", err)
	}
	return parseConfig(path, src, base)
}

// ParseConfig parses HCL agent configuration src (filename names it in
// diagnostics) over the defaults and validates it.
func ParseConfig(filename string, src []byte) (*Config, error) {
	c, err := parseConfig(filename, src, DefaultConfig())
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	return c, nil
}

// parseConfig decodes src over c (the defaults, or dev mode's) without
// validating the result.
func parseConfig(filename string, src []byte, c *Config) (*Config, error) {
	f, diags := hclparse.NewParser().ParseHCL(src, filename)
	if diags.HasErrors() {
		return nil, diagError(diags)
	}
	var fc fileConfig
	if diags := gohcl.DecodeBody(f.Body, nil, &fc); diags.HasErrors() {
		return nil, diagError(diags)
	}
	set(&c.DataDir, fc.DataDir)
	set(&c.BindAddr, fc.BindAddr)
	set(&c.Datacenter, fc.Datacenter)
	set(&c.Region, fc.Region)
	set(&c.NodeName, fc.NodeName)
	set(&c.PluginDir, fc.PluginDir)
	set(&c.LogLevel, fc.LogLevel)
	set(&c.Dev, fc.Dev)
	set(&c.Sidecar, fc.Sidecar)
	set(&c.EnvoyBinary, fc.EnvoyBinary)
	if p := fc.Ports; p != nil {
		set(&c.Ports.HTTP, p.HTTP)
		set(&c.Ports.ConnectHTTP, p.ConnectHTTP)
		set(&c.Ports.GRPC, p.GRPC)
		set(&c.Ports.EtcdClient, p.EtcdClient)
		set(&c.Ports.EtcdPeer, p.EtcdPeer)
		set(&c.Ports.RPC, p.RPC)
	}
	fc.TLS.apply(&c.TLS)
	if err := applyPlugins(filename, fc.Plugins, c); err != nil {
		return nil, err
	}
	if err := fc.Client.apply(&c.Client); err != nil {
		return nil, err
	}
	if err := fc.Server.apply(&c.Server); err != nil {
		return nil, err
	}
	if err := fc.applyCluster(&c.Cluster); err != nil {
		return nil, err
	}
	if err := fc.ACL.apply(&c.ACL); err != nil {
		return nil, err
	}
	if h := fc.HTTPAPI; h != nil {
		c.HTTPAPI.AllowedHosts, c.HTTPAPI.AllowedOrigins = h.AllowedHosts, h.AllowedOrigins
	}
	if cn := fc.Connect; cn != nil {
		set(&c.Connect.DefaultIntentionPolicy, cn.DefaultIntentionPolicy)
		set(&c.Connect.MaxAPILeaves, cn.MaxAPILeaves)
		set(&c.Connect.SidecarDriver, cn.SidecarDriver)
		set(&c.Connect.SidecarImage, cn.SidecarImage)
		if err := setDurations("connect", durationField{"leaf_ttl", cn.LeafTTL, &c.Connect.LeafTTL},
			durationField{"leaf_idle_ttl", cn.LeafIdleTTL, &c.Connect.LeafIdleTTL}); err != nil {
			return nil, err
		}
	}
	if c.DataDir != "" {
		abs, err := filepath.Abs(c.DataDir)
		if err != nil {
			return nil, fmt.Errorf("failed to resolve data_dir: %w", err)
		}
		c.DataDir = abs
	}
	return c, nil
}

func set[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

// diagError renders HCL diagnostics as "file:line:col: summary; detail".
func diagError(diags hcl.Diagnostics) error {
	var lines []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		line := d.Summary
		if d.Detail != "" {
			line += "; " + d.Detail
		}
		if d.Subject != nil {
			line = fmt.Sprintf("%s:%d:%d: %s", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, line)
		}
		lines = append(lines, line)
	}
	return fmt.Errorf("invalid agent configuration: %s", strings.Join(lines, "; "))
}
