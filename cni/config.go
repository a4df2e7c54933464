package cni

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	cniutils "github.com/containernetworking/cni/pkg/utils"
	"github.com/hashicorp/go-hclog"
)

// Defaults applied by New to empty Config fields.
const (
	DefaultPluginDir   = "/opt/cni/bin"
	DefaultConfigDir   = "/opt/cni/config"
	DefaultBridgeName  = "meshlet"
	DefaultSubnet      = "172.26.64.0/20"
	DefaultNetworkName = "meshlet"
	DefaultStateDir    = "/var/run/meshlet/cni"
	DefaultNetNSDir    = "/var/run/netns"
	DefaultAdminChain  = "MESHLET-ADMIN"
)

// Config configures a Manager. Empty fields take the Default* values.
type Config struct {
	PluginDir   string // cni_path: dir with the plugin binaries
	ConfigDir   string // cni_config_dir: *.conflist files for `mode = "cni/<name>"`
	BridgeName  string // default "meshlet"
	Subnet      string // default "172.26.64.0/20"
	NetworkName string // default "meshlet" (CNI network name; also tags iptables rules/chains)
	StateDir    string // host-local IPAM dataDir and libcni cache dir (default /var/run/meshlet/cni)
	NetNSDir    string // default /var/run/netns
	AdminChain  string // firewall admin chain, default "MESHLET-ADMIN"
}

// maxChainLen is iptables' limit on chain names.
const maxChainLen = 28

// maxIfNameLen is the kernel's limit on interface names (IFNAMSIZ - 1).
const maxIfNameLen = 15

// withDefaults returns cfg with empty fields filled in.
func (cfg Config) withDefaults() Config {
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&cfg.PluginDir, DefaultPluginDir)
	def(&cfg.ConfigDir, DefaultConfigDir)
	def(&cfg.BridgeName, DefaultBridgeName)
	def(&cfg.Subnet, DefaultSubnet)
	def(&cfg.NetworkName, DefaultNetworkName)
	def(&cfg.StateDir, DefaultStateDir)
	def(&cfg.NetNSDir, DefaultNetNSDir)
	def(&cfg.AdminChain, DefaultAdminChain)
	return cfg
}

// validate checks a defaulted Config and returns the first problem found.
func (cfg Config) validate() error {
	for _, d := range []struct{ name, path string }{
		{"cni_path", cfg.PluginDir}, {"cni_config_dir", cfg.ConfigDir},
		{"state dir", cfg.StateDir}, {"netns dir", cfg.NetNSDir},
	} {
		if !filepath.IsAbs(d.path) {
			return newError(ErrInvalidConfig, fmt.Sprintf("%s %q must be an absolute path", d.name, d.path), nil)
		}
	}
	if _, err := parseSubnet(cfg.Subnet); err != nil {
		return err
	}
	if len(cfg.BridgeName) > maxIfNameLen || strings.ContainsAny(cfg.BridgeName, "/: \t\n") {
		return newError(ErrInvalidConfig, fmt.Sprintf("bridge name %q is not a valid interface name (at most %d characters, no '/', ':' or spaces)", cfg.BridgeName, maxIfNameLen), nil)
	}
	if cniutils.ValidateNetworkName(cfg.NetworkName) != nil {
		return newError(ErrInvalidConfig, fmt.Sprintf("network name %q is invalid: use letters, digits, '-', '_' and '.'", cfg.NetworkName), nil)
	}
	if len(cfg.AdminChain) > maxChainLen || strings.ContainsAny(cfg.AdminChain, " \t\n!") {
		return newError(ErrInvalidConfig, fmt.Sprintf("admin chain %q is not a valid iptables chain name (at most %d characters, no spaces)", cfg.AdminChain, maxChainLen), nil)
	}
	return nil
}

// parseSubnet parses an IPv4 CIDR with room for a gateway and one address.
func parseSubnet(s string) (*net.IPNet, error) {
	ip, ipnet, err := net.ParseCIDR(s)
	if err != nil {
		return nil, newError(ErrInvalidConfig, fmt.Sprintf("subnet %q is not a CIDR like 172.26.64.0/20", s), err)
	}
	ones, bits := ipnet.Mask.Size()
	if ip.To4() == nil || bits != 32 {
		return nil, newError(ErrInvalidConfig, fmt.Sprintf("subnet %q must be IPv4", s), nil)
	}
	if ones > 30 {
		return nil, newError(ErrInvalidConfig, fmt.Sprintf("subnet %q is too small: use /30 or larger", s), nil)
	}
	if !ip.Equal(ipnet.IP) {
		return nil, newError(ErrInvalidConfig, fmt.Sprintf("subnet %q has host bits set; did you mean %s?", s, ipnet), nil)
	}
	return ipnet, nil
}

// Manager sets up and tears down allocation network namespaces. See the
// package comment for the locking rule.
type Manager struct {
	cfg    Config
	subnet *net.IPNet
	logger hclog.Logger
	cni    *libcni.CNIConfig
	// builtin is the parsed conflist of the "bridge" mode; noPorts is the
	// same without portmap, for allocations that map no port.
	builtin, noPorts *libcni.NetworkConfigList

	// lookPath finds the iptables binary; a field so tests can fake it.
	lookPath func(string) (string, error)
	// retryDelay is the pause before ADD attempt n (n >= 2).
	retryDelay func(attempt int) time.Duration
	// cleanupTimeout bounds each cleanup (see defaultCleanupTimeout); a
	// field so tests can shorten it (before first use).
	cleanupTimeout time.Duration

	// mountShared records that NetNSDir was made a shared mount
	// (guarded by hostMu).
	mountShared bool
	// natReady records that meshlet's nat rules were ensured (guarded by
	// hostMu).
	natReady bool

	mu sync.Mutex
	// added holds the networks this Manager has run a successful ADD of
	// (guarded by mu; see Manager.add).
	added map[string]bool
}

// New validates cfg (after filling in defaults) and returns a Manager. It
// does not touch the system: plugin binaries and iptables are checked by
// each Setup, with errors that say what to install.
func New(cfg Config, logger hclog.Logger) (*Manager, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	subnet, _ := parseSubnet(cfg.Subnet)
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	var lists [2]*libcni.NetworkConfigList
	for i, withPortmap := range []bool{true, false} {
		data, err := buildConfList(cfg, withPortmap)
		if err != nil {
			return nil, err
		}
		if lists[i], err = libcni.NetworkConfFromBytes(data); err != nil {
			return nil, fmt.Errorf("failed to parse generated conflist: %w", err)
		}
	}
	return &Manager{
		cfg:            cfg,
		subnet:         subnet,
		logger:         logger.Named("cni"),
		cni:            libcni.NewCNIConfigWithCacheDir([]string{cfg.PluginDir}, cacheDir(cfg), nil),
		builtin:        lists[0],
		noPorts:        lists[1],
		lookPath:       exec.LookPath,
		retryDelay:     defaultRetryDelay,
		cleanupTimeout: defaultCleanupTimeout,
		added:          map[string]bool{},
	}, nil
}

// defaultRetryDelay waits 250ms per previous attempt plus up to 250ms of
// jitter, so concurrent agents do not retry in lock step.
func defaultRetryDelay(attempt int) time.Duration {
	return time.Duration(attempt-1)*250*time.Millisecond + rand.N(250*time.Millisecond)
}

// NetNSPath returns where the allocation's namespace is (or would be)
// bind-mounted: <NetNSDir>/<allocID>.
func (m *Manager) NetNSPath(allocID string) string {
	return filepath.Join(m.cfg.NetNSDir, allocID)
}

func cacheDir(cfg Config) string  { return filepath.Join(cfg.StateDir, "cache") }
func ipamDir(cfg Config) string   { return filepath.Join(cfg.StateDir, "ipam") }
func recordDir(cfg Config) string { return filepath.Join(cfg.StateDir, "netns") }

// leaseDir is where host-local keeps the built-in network's leases.
func (m *Manager) leaseDir() string { return filepath.Join(ipamDir(m.cfg), m.cfg.NetworkName) }
