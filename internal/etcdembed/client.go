package etcdembed

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrUnreachable is returned by Connect when the cluster does not answer.
var ErrUnreachable = errors.New("etcd cluster unreachable")

// DefaultDialTimeout bounds Connect's check when ClientConfig.DialTimeout
// is zero.
const DefaultDialTimeout = 5 * time.Second

// healthKey is read by Connect's check (as etcdctl endpoint health does).
const healthKey = "health"

// ClientConfig configures Connect.
type ClientConfig struct {
	Endpoints []string // client URLs of one or more members
	TLS       *TLSFiles
	// DialTimeout bounds the connection check (default 5 s).
	DialTimeout time.Duration
	// Logger receives the client's logs under "etcd_client" at warn and
	// above (default hclog.Default()).
	Logger hclog.Logger
	// MaxCallSendMsgSize is the largest request the client sends (default
	// DefaultMaxRequestBytes, the members' limit; etcd's client default is
	// 2 MiB).
	MaxCallSendMsgSize int
	// AutoSyncInterval, when set, refreshes the endpoints from the
	// cluster's member list this often (members added later are used).
	AutoSyncInterval time.Duration
}

// Connect returns a client of an external or embedded etcd cluster after
// checking that the cluster answers a linearizable read (which needs a
// quorum) within DialTimeout. The caller closes the client.
func Connect(ctx context.Context, cfg ClientConfig) (*clientv3.Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: no etcd endpoints", ErrInvalidConfig)
	}
	timeout := orDefault(cfg.DialTimeout, DefaultDialTimeout)
	lg := cfg.Logger
	if lg == nil {
		lg = hclog.Default()
	}
	tlsCfg, err := clientTLS(cfg.TLS)
	if err != nil {
		return nil, err
	}
	eps := strings.Join(cfg.Endpoints, ",")
	c, err := clientv3.New(clientv3.Config{
		Endpoints:            cfg.Endpoints,
		TLS:                  tlsCfg,
		DialTimeout:          timeout,
		DialKeepAliveTime:    30 * time.Second,
		DialKeepAliveTimeout: 10 * time.Second,
		AutoSyncInterval:     cfg.AutoSyncInterval,
		MaxCallSendMsgSize:   orDefault(cfg.MaxCallSendMsgSize, DefaultMaxRequestBytes),
		Logger:               newZapLogger(lg.Named("etcd_client"), hclog.Warn, nil),
		Context:              context.WithoutCancel(ctx),
	})
	if err != nil {
		return nil, fmt.Errorf("failed to create etcd client for %s: %w", eps, err)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := c.Get(cctx, healthKey, clientv3.WithCountOnly()); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %s did not answer within %s: %w", ErrUnreachable, eps, timeout, err)
	}
	return c, nil
}

// clientTLS builds the client's TLS config; nil files mean plain HTTP (or
// the system roots for an https endpoint).
func clientTLS(f *TLSFiles) (*tls.Config, error) {
	if f == nil {
		return nil, nil
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, fmt.Errorf("%w: client TLS needs both CertFile and KeyFile, or neither", ErrInvalidConfig)
	}
	info := transport.TLSInfo{CertFile: f.CertFile, KeyFile: f.KeyFile, TrustedCAFile: f.CAFile}
	c, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("failed to load etcd client TLS files: %w", err)
	}
	return c, nil
}
