package sidecar

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Defaults applied by New to a zero field.
const (
	DefaultAdminBind    = "127.0.0.2:19001"
	DefaultDrainTimeout = 5 * time.Second
)

// ErrInvalidConfig is returned (wrapped) by New for a Config it cannot use.
var ErrInvalidConfig = errors.New("invalid sidecar config")

// Config configures one proxy instance.
type Config struct {
	// ProxyID is the xDS node ID: the sidecar's service ID. Required.
	ProxyID string
	// Cluster is the xDS node cluster: the service name.
	Cluster string
	// XDSAddr is the control plane's gRPC address: "unix:///path/to.sock"
	// or "host:port" (plaintext HTTP/2). Required.
	XDSAddr string
	// AdminBind is the admin listener's address; DefaultAdminBind if empty.
	AdminBind string
	// Delta selects incremental (delta) xDS; false selects
	// state-of-the-world. DefaultConfig and meshlet's CLI set it to true; a
	// zero Config therefore speaks state-of-the-world.
	Delta bool
	// Token, if set, is sent as gRPC metadata x-consul-token on every call.
	Token string
	// DrainTimeout bounds how long a removed listener, and the proxy at
	// Close, wait for open connections before closing them;
	// DefaultDrainTimeout if zero.
	DrainTimeout time.Duration
	// Logger is the parent logger; the proxy logs under "sidecar". A null
	// logger is used if nil.
	Logger hclog.Logger
	// PlainIO makes the data path use only documented standard library
	// behaviour: sockets read and written through net.Conn, crypto/tls
	// straight over them, relays by io.Copy. The default path (raw
	// system calls, a transport under crypto/tls that batches records,
	// relays that release idle buffers) relies on crypto/tls and runtime
	// details its tests check; PlainIO is the fallback should a Go
	// upgrade break them. New also sets it when the environment has
	// MESHLET_PROXY_PLAIN_IO=1 (see EnvPlainIO).
	PlainIO bool
	// OnReady, when set, is called once, on its own goroutine, when the
	// initial configuration is applied (the proxy is ready).
	OnReady func()
}

// EnvPlainIO is the environment variable that turns Config.PlainIO on
// ("1", "true") or leaves it as configured ("0", "false", unset).
const EnvPlainIO = "MESHLET_PROXY_PLAIN_IO"

// DefaultConfig returns a Config with the documented defaults (delta xDS,
// DefaultAdminBind, DefaultDrainTimeout) for the given node and control plane.
func DefaultConfig(proxyID, cluster, xdsAddr string) Config {
	return Config{
		ProxyID:      proxyID,
		Cluster:      cluster,
		XDSAddr:      xdsAddr,
		AdminBind:    DefaultAdminBind,
		Delta:        true,
		DrainTimeout: DefaultDrainTimeout,
	}
}

// withDefaults validates cfg and fills its defaults.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.ProxyID == "" {
		return cfg, fmt.Errorf("%w: ProxyID is required", ErrInvalidConfig)
	}
	if _, err := grpcTarget(cfg.XDSAddr); err != nil {
		return cfg, err
	}
	if cfg.AdminBind == "" {
		cfg.AdminBind = DefaultAdminBind
	}
	if _, _, err := net.SplitHostPort(cfg.AdminBind); err != nil {
		return cfg, fmt.Errorf("%w: AdminBind %q is not host:port", ErrInvalidConfig, cfg.AdminBind)
	}
	if cfg.DrainTimeout < 0 {
		return cfg, fmt.Errorf("%w: DrainTimeout must not be negative", ErrInvalidConfig)
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if v, ok := os.LookupEnv(EnvPlainIO); ok && v != "" {
		plain, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("%w: %s=%q is not a boolean", ErrInvalidConfig, EnvPlainIO, v)
		}
		cfg.PlainIO = cfg.PlainIO || plain
	}
	return cfg, nil
}

// grpcTarget turns XDSAddr into a gRPC dial target that never goes through
// the DNS resolver.
func grpcTarget(addr string) (string, error) {
	switch {
	case addr == "":
		return "", fmt.Errorf("%w: XDSAddr is required", ErrInvalidConfig)
	case strings.HasPrefix(addr, "unix://"):
		if strings.TrimPrefix(addr, "unix://") == "" {
			return "", fmt.Errorf("%w: XDSAddr %q has no socket path", ErrInvalidConfig, addr)
		}
		return addr, nil
	case strings.HasPrefix(addr, "unix:"):
		return addr, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "", fmt.Errorf("%w: XDSAddr %q is neither unix:///path nor host:port", ErrInvalidConfig, addr)
	}
	return "passthrough:///" + net.JoinHostPort(host, port), nil
}
