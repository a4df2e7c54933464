package sidecar

import (
	"errors"
	"fmt"
	"net"
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
}

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
