package etcdembed

import (
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

// Defaults for Config.
const (
	DefaultQuotaBackendBytes       = 2 << 30 // etcd's own default, made explicit
	DefaultMaxTxnOps               = 1 << 16 // a plan writes several keys per allocation
	DefaultMaxRequestBytes         = 32 << 20
	DefaultSnapshotCount           = 10000
	DefaultAutoCompactionMode      = "periodic"
	DefaultAutoCompactionRetention = "1h"
	DefaultClusterToken            = "meshlet"
	DefaultStartTimeout            = time.Minute
	// WALSegmentBytes is the WAL segment size every member of this process
	// uses (etcd's is 64 MB); see the package documentation.
	WALSegmentBytes = 8 << 20

	// Timing with Dev set: a lone member elects itself in tens of
	// milliseconds and a lease's minimum TTL drops below a second.
	devTickMs     = 20
	devElectionMs = 200
)

// Cluster states for Config.ClusterState.
const (
	ClusterStateNew      = embed.ClusterStateFlagNew
	ClusterStateExisting = embed.ClusterStateFlagExisting
)

// ErrInvalidConfig marks a Config or ClientConfig that Start or Connect
// rejects before touching etcd.
var ErrInvalidConfig = errors.New("invalid etcd config")

// TLSFiles names PEM files for mutual TLS. For a member's client or peer
// URL all three are required and clients must present a certificate the CA
// signed. A peer certificate is used both to serve and to dial other
// members, so it needs the server and client extended key usages. For
// ClientConfig, CertFile and KeyFile are optional (server-only TLS).
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
	// AllowedHostnames, when set, are the only certificate names a peer
	// (or client) may present, on top of being signed by the CA: meshlet
	// admits server certificates only, not its client nodes' ones from the
	// same CA.
	AllowedHostnames []string
}

// Config configures an embedded member. Zero values take the defaults
// documented on each field.
type Config struct {
	DataDir string // member data dir; created 0700
	Name    string // member name, unique in the cluster

	// ClientURL and PeerURL are listened on and, unless the Advertise
	// fields are set, advertised: "http://127.0.0.1:2379" ("https://..."
	// with ClientTLS or PeerTLS). The host must be an IP address.
	ClientURL, PeerURL                   string
	AdvertiseClientURL, AdvertisePeerURL string

	// InitialCluster is "name=peerURL,..." (default Name=AdvertisePeerURL).
	// ClusterState is "new" (default) or "existing" to join a running
	// cluster (see AddMember). Both are ignored when DataDir already holds
	// a member. A "new" cluster of several members is ready only once a
	// quorum of them started: start them concurrently.
	InitialCluster string
	ClusterState   string
	ClusterToken   string // default "meshlet"; tells clusters apart

	ClientTLS, PeerTLS *TLSFiles // optional; client certificates are then required

	// Logger receives etcd's logs under the name "etcd" at LogLevel and
	// above (default warn). Default hclog.Default().
	Logger   hclog.Logger
	LogLevel hclog.Level

	Dev bool // fast raft timing (20 ms ticks, 200 ms elections) for dev and tests

	QuotaBackendBytes int64  // default 2 GiB; the store turns read-only past it
	MaxTxnOps         uint   // default 65536
	MaxRequestBytes   uint   // default 32 MiB
	SnapshotCount     uint64 // raft entries between snapshots; default 10000

	// AutoCompactionMode is "periodic" (default) or "revision";
	// AutoCompactionRetention is a duration ("1h", the default) or a
	// revision count. Set it to "0" to turn compaction off.
	AutoCompactionMode, AutoCompactionRetention string

	StartTimeout time.Duration // how long Start waits for readiness; default 1m
}

// withDefaults returns cfg with its defaults filled in, or an
// ErrInvalidConfig error.
func (cfg Config) withDefaults() (Config, error) {
	switch {
	case cfg.DataDir == "":
		return cfg, fmt.Errorf("%w: DataDir is required", ErrInvalidConfig)
	case cfg.Name == "":
		return cfg, fmt.Errorf("%w: Name is required", ErrInvalidConfig)
	case cfg.ClientURL == "" || cfg.PeerURL == "":
		return cfg, fmt.Errorf("%w: ClientURL and PeerURL are required", ErrInvalidConfig)
	}
	cfg.AdvertiseClientURL = orDefault(cfg.AdvertiseClientURL, cfg.ClientURL)
	cfg.AdvertisePeerURL = orDefault(cfg.AdvertisePeerURL, cfg.PeerURL)
	cfg.InitialCluster = orDefault(cfg.InitialCluster, cfg.Name+"="+cfg.AdvertisePeerURL)
	cfg.ClusterState = orDefault(cfg.ClusterState, ClusterStateNew)
	if cfg.ClusterState != ClusterStateNew && cfg.ClusterState != ClusterStateExisting {
		return cfg, fmt.Errorf("%w: ClusterState must be %q or %q, got %q", ErrInvalidConfig, ClusterStateNew, ClusterStateExisting, cfg.ClusterState)
	}
	cfg.ClusterToken = orDefault(cfg.ClusterToken, DefaultClusterToken)
	if cfg.Logger == nil {
		cfg.Logger = hclog.Default()
	}
	if cfg.LogLevel == hclog.NoLevel {
		cfg.LogLevel = hclog.Warn
	}
	cfg.QuotaBackendBytes = orDefault(cfg.QuotaBackendBytes, DefaultQuotaBackendBytes)
	cfg.MaxTxnOps = orDefault(cfg.MaxTxnOps, DefaultMaxTxnOps)
	cfg.MaxRequestBytes = orDefault(cfg.MaxRequestBytes, DefaultMaxRequestBytes)
	cfg.SnapshotCount = orDefault(cfg.SnapshotCount, DefaultSnapshotCount)
	cfg.AutoCompactionMode = orDefault(cfg.AutoCompactionMode, DefaultAutoCompactionMode)
	cfg.AutoCompactionRetention = orDefault(cfg.AutoCompactionRetention, DefaultAutoCompactionRetention)
	cfg.StartTimeout = orDefault(cfg.StartTimeout, DefaultStartTimeout)
	return cfg, nil
}

// embedConfig translates a defaulted Config into etcd's. Its logger treats
// the messages of a normal close as routine once closing is set.
func (cfg Config) embedConfig(closing *atomic.Bool) (*embed.Config, error) {
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.DataDir
	var err error
	if ec.ListenClientUrls, err = parseURL("ClientURL", cfg.ClientURL, cfg.ClientTLS != nil); err != nil {
		return nil, err
	}
	if ec.AdvertiseClientUrls, err = parseURL("AdvertiseClientURL", cfg.AdvertiseClientURL, cfg.ClientTLS != nil); err != nil {
		return nil, err
	}
	if ec.ListenPeerUrls, err = parseURL("PeerURL", cfg.PeerURL, cfg.PeerTLS != nil); err != nil {
		return nil, err
	}
	if ec.AdvertisePeerUrls, err = parseURL("AdvertisePeerURL", cfg.AdvertisePeerURL, cfg.PeerTLS != nil); err != nil {
		return nil, err
	}
	if ec.ClientTLSInfo, err = serverTLS("ClientTLS", cfg.ClientTLS); err != nil {
		return nil, err
	}
	if ec.PeerTLSInfo, err = serverTLS("PeerTLS", cfg.PeerTLS); err != nil {
		return nil, err
	}
	ec.InitialCluster = cfg.InitialCluster
	ec.ClusterState = cfg.ClusterState
	ec.InitialClusterToken = cfg.ClusterToken

	ec.EnableGRPCGateway = false
	ec.EnablePprof = false
	ec.Metrics = "basic"
	ec.QuotaBackendBytes = cfg.QuotaBackendBytes
	ec.MaxTxnOps = cfg.MaxTxnOps
	ec.MaxRequestBytes = cfg.MaxRequestBytes
	ec.SnapshotCount = cfg.SnapshotCount
	ec.AutoCompactionMode = cfg.AutoCompactionMode
	ec.AutoCompactionRetention = cfg.AutoCompactionRetention
	if cfg.Dev {
		ec.TickMs, ec.ElectionMs = devTickMs, devElectionMs
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newZapLogger(cfg.Logger.Named("etcd"), cfg.LogLevel, closing))
	return ec, nil
}

// parseURL parses a member URL and checks its scheme against whether TLS
// is configured (etcd would silently serve plain HTTP on an http URL with
// certificates).
func parseURL(field, raw string, tls bool) ([]url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %q: %w", ErrInvalidConfig, field, raw, err)
	}
	want := "http"
	if tls {
		want = "https"
	}
	if u.Scheme != want || u.Host == "" || u.Port() == "" {
		return nil, fmt.Errorf("%w: %s %q must be %s://<ip>:<port>", ErrInvalidConfig, field, raw, want)
	}
	return []url.URL{*u}, nil
}

func serverTLS(field string, f *TLSFiles) (transport.TLSInfo, error) {
	if f == nil {
		return transport.TLSInfo{}, nil
	}
	if f.CAFile == "" || f.CertFile == "" || f.KeyFile == "" {
		return transport.TLSInfo{}, fmt.Errorf("%w: %s needs CAFile, CertFile and KeyFile", ErrInvalidConfig, field)
	}
	return transport.TLSInfo{
		CertFile:         f.CertFile,
		KeyFile:          f.KeyFile,
		TrustedCAFile:    f.CAFile,
		ClientCertAuth:   true,
		AllowedHostnames: f.AllowedHostnames,
	}, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// joinURLs is strings.Join over url.URL values.
func joinURLs(us []url.URL) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.String()
	}
	return out
}
