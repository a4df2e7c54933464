package ca

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshlet/meshlet/internal/pubsub"
)

// Defaults for Config.
const (
	DefaultDatacenter = "dc1"
	DefaultLeafTTL    = 72 * time.Hour
	DefaultRootTTL    = 10 * 365 * 24 * time.Hour
	DefaultSignRate   = 50
	// DefaultMaxAPILeaves caps the leaves cached only for API callers.
	DefaultMaxAPILeaves = 1024
	// DefaultLeafIdleTTL: an API-only leaf nobody asked for this long is
	// released (Consul's agent cache keeps an unused entry 72h too).
	DefaultLeafIdleTTL = 72 * time.Hour
)

// Config configures a Manager. Zero values take the defaults.
type Config struct {
	// Dir is the persistence directory (state and root keys, all 0600):
	// short for Storage: NewDirStorage(Dir). With neither Dir, Storage nor
	// Signer everything stays in memory (tests, benchmarks).
	Dir string
	// Storage persists the CA's state (the cluster's servers: etcd). At
	// most one of Dir, Storage and Signer may be set.
	Storage Storage
	// Signer puts the Manager in remote mode (a client agent): it holds
	// no root key, its roots arrive through SetRoots, leaf keys are
	// generated locally and only their CSRs go to Signer.
	Signer RemoteSigner
	// ClusterID is a UUID; generated and persisted on first start if empty.
	// A ClusterID that differs from the persisted one (in remote mode: from
	// the trust domain of SetRoots) is an error.
	ClusterID  string
	Datacenter string        // default "dc1"
	LeafTTL    time.Duration // default 72h
	RootTTL    time.Duration // default 10 years
	// SignRate is leaf signings per second (default 50), with a burst of
	// the same size (at least 1).
	SignRate float64
	// RootOverlap is how long a rotated-out root stays trusted at least.
	// It is dropped only once this has passed AND no leaf this manager
	// caches still depends on it (leaves cached elsewhere are not
	// tracked). Default: LeafTTL, so every leaf the old root ever signed
	// has expired by then and a peer that missed the rotation (or holds a
	// leaf fetched before it) keeps working.
	RootOverlap time.Duration
	// MaxAPILeaves caps the leaves cached for API callers only (not held by
	// HoldLeaf); the least recently used is evicted. Default 1024.
	MaxAPILeaves int
	// LeafIdleTTL releases an API-only leaf after this long without a Leaf
	// call. Default 72h.
	LeafIdleTTL time.Duration
	// Limiter overrides the SignRate token bucket (tests).
	Limiter Limiter
}

func (c *Config) setDefaults() error {
	if c.Datacenter == "" {
		c.Datacenter = DefaultDatacenter
	}
	if c.LeafTTL == 0 {
		c.LeafTTL = DefaultLeafTTL
	}
	if c.RootTTL == 0 {
		c.RootTTL = DefaultRootTTL
	}
	if c.SignRate == 0 {
		c.SignRate = DefaultSignRate
	}
	if c.RootOverlap == 0 {
		c.RootOverlap = c.LeafTTL
	}
	if c.MaxAPILeaves == 0 {
		c.MaxAPILeaves = DefaultMaxAPILeaves
	}
	if c.LeafIdleTTL == 0 {
		c.LeafIdleTTL = DefaultLeafIdleTTL
	}
	switch {
	case c.Signer != nil && (c.Dir != "" || c.Storage != nil):
		return errors.New("invalid CA config: Signer (remote mode) excludes Dir and Storage")
	case c.Dir != "" && c.Storage != nil:
		return errors.New("invalid CA config: set Dir or Storage, not both")
	case !validToken(c.Datacenter, 63):
		return fmt.Errorf("invalid datacenter %q", c.Datacenter)
	case c.LeafTTL < time.Second:
		return fmt.Errorf("invalid leaf TTL %s: must be at least 1s", c.LeafTTL)
	case c.RootTTL <= c.LeafTTL:
		return fmt.Errorf("invalid root TTL %s: must exceed the leaf TTL %s", c.RootTTL, c.LeafTTL)
	case c.SignRate < 0:
		return fmt.Errorf("invalid sign rate %v", c.SignRate)
	case c.RootOverlap < 0:
		return fmt.Errorf("invalid root overlap %s", c.RootOverlap)
	case c.MaxAPILeaves < 0:
		return fmt.Errorf("invalid max API leaves %d", c.MaxAPILeaves)
	case c.LeafIdleTTL < 0:
		return fmt.Errorf("invalid leaf idle TTL %s", c.LeafIdleTTL)
	}
	if c.ClusterID != "" {
		if _, err := uuid.Parse(c.ClusterID); err != nil {
			return fmt.Errorf("invalid cluster ID %q: %w", c.ClusterID, err)
		}
		c.ClusterID = strings.ToLower(c.ClusterID)
	}
	return nil
}

// Manager is the CA. All methods are safe for concurrent use.
//
// Locking: leafEntry.issue (one per service, serializes first issuance) is
// taken before Manager.mu, never after. saveMu serializes changes of the
// roots (start, Rotate, prune, Reload, SetRoots) and is taken before mu;
// storage calls happen with saveMu held but never mu. Subscribers are
// called without any lock held.
type Manager struct {
	cfg     Config
	logger  hclog.Logger
	limiter Limiter
	metrics *metrics
	storage Storage // nil: memory or remote mode

	saveMu sync.Mutex

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.RWMutex
	closed      bool
	clusterID   string
	trustDomain string       // "" in remote mode before the first SetRoots
	stored      *StoredState // last loaded or saved; nil in remote mode
	index       uint64
	rootsIndex  uint64    // index at the last change of roots (Roots.Index)
	roots       []*rootCA // oldest first; exactly one is Active (none in remote mode before SetRoots)
	pool        *x509.CertPool
	leaves      map[string]*leafEntry
	leafDNS     map[string][]string // extra DNS SANs per service (SetLeafDNS)
	unheld      int                 // entries with holds == 0
	renewers    atomic.Int64
	// signedTTL is the lifetime (ns) of the last leaf the servers signed
	// for a remote-mode CA: their TTL, which may differ from cfg.LeafTTL.
	signedTTL  atomic.Int64
	pruneTimer *time.Timer   // the earliest end of a rotated-out root's overlap
	pruneRetry *time.Timer   // a failed prune tried again
	pruneWait  time.Duration // backoff of pruneRetry; 0 after a success
	hub        pubsub.Hub[Event]

	// Hooks for tests; set before the first Leaf, Rotate or SetRoots call.
	now              func() time.Time
	randFloat        func() float64
	pruneRetryMin    time.Duration // first backoff of a failed prune
	remoteStaleRetry time.Duration // see remoteStaleRetry
	maxRenewSleep    time.Duration // see maxRenewSleep
}

// New loads the CA from its storage (cfg.Dir or cfg.Storage) or creates it
// (cluster ID and an ECDSA P-256 root; when another server stored one
// first, that one is used). In remote mode (cfg.Signer) it starts without
// roots. reg may be nil.
func New(cfg Config, logger hclog.Logger, reg prometheus.Registerer) (*Manager, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("failed to configure CA: %w", err)
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	met, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		cfg:              cfg,
		logger:           logger.Named("ca"),
		limiter:          cfg.Limiter,
		metrics:          met,
		leaves:           map[string]*leafEntry{},
		now:              time.Now,
		randFloat:        rand.Float64,
		pruneRetryMin:    pruneRetryMin,
		remoteStaleRetry: remoteStaleRetry,
		maxRenewSleep:    maxRenewSleep,
	}
	if m.limiter == nil {
		m.limiter = NewTokenBucket(cfg.SignRate, int(cfg.SignRate))
	}
	m.storage = cfg.Storage
	if cfg.Dir != "" {
		m.storage = newDirStorage(cfg.Dir, m.logger)
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.pool = x509.NewCertPool()
	if m.remote() {
		m.logger.Info("CA in remote mode: waiting for the cluster's roots")
		return m, nil
	}
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	if err := m.load(m.ctx); err != nil {
		m.cancel()
		return nil, err
	}
	return m, nil
}

// remote reports whether m is in remote mode (Config.Signer).
func (m *Manager) remote() bool { return m.cfg.Signer != nil }

func (m *Manager) activeLocked() *rootCA {
	for _, r := range m.roots {
		if r.Active {
			return r
		}
	}
	return nil
}

func (m *Manager) rootLocked(id string) *rootCA {
	for _, r := range m.roots {
		if r.ID == id {
			return r
		}
	}
	return nil
}

func (m *Manager) rebuildPoolLocked() {
	pool := x509.NewCertPool()
	for _, r := range m.roots {
		pool.AddCert(r.cert)
	}
	m.pool = pool
}

// ClusterID is the cluster's UUID ("" in remote mode before SetRoots).
func (m *Manager) ClusterID() string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.clusterID
}

// Datacenter is the datacenter in identities.
func (m *Manager) Datacenter() string { return m.cfg.Datacenter }

// TrustDomain is "<cluster-uuid>.meshlet" ("" in remote mode before the
// first SetRoots).
func (m *Manager) TrustDomain() string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.trustDomain
}

// SpiffeID is the identity of service in this trust domain.
func (m *Manager) SpiffeID(service string) string {
	return m.spiffeID(m.TrustDomain(), service)
}

func (m *Manager) spiffeID(trustDomain, service string) string {
	return SpiffeID{TrustDomain: trustDomain, Namespace: DefaultNamespace, Datacenter: m.cfg.Datacenter, Service: service}.URI()
}

// Roots returns every trusted root (during a rotation, old and new), the
// active one marked. It never contains private keys.
func (m *Manager) Roots() Roots {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := Roots{TrustDomain: m.trustDomain, Roots: make([]Root, 0, len(m.roots)), Index: m.rootsIndex}
	for _, r := range m.roots {
		root := r.Root
		root.IntermediateCertsPEM = append([]string(nil), r.IntermediateCertsPEM...)
		if r.Active {
			out.ActiveRootID = r.ID
		}
		out.Roots = append(out.Roots, root)
	}
	return out
}

// Index increases with every CA change (roots or leaves); it is the
// X-Consul-Index of the CA endpoints.
func (m *Manager) Index() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.index
}

// Subscribe calls fn after every change until cancel is called. fn runs
// synchronously on the goroutine that made the change and must not block.
func (m *Manager) Subscribe(fn func(Event)) (cancel func()) {
	return m.hub.Subscribe(fn)
}

func (m *Manager) emit(ev Event) { m.hub.Publish(ev) }

// VerifyPeer verifies a peer's certificate chain (leaf first, as in
// tls.Config.VerifyPeerCertificate) against the current roots, requires a
// service identity of this trust domain and returns its service name.
func (m *Manager) VerifyPeer(rawCerts [][]byte) (string, error) {
	if len(rawCerts) == 0 {
		return "", fmt.Errorf("%w: no certificate presented", ErrUntrusted)
	}
	certs := make([]*x509.Certificate, 0, len(rawCerts))
	for _, raw := range rawCerts {
		c, err := x509.ParseCertificate(raw)
		if err != nil {
			return "", fmt.Errorf("%w: failed to parse peer certificate: %w", ErrUntrusted, err)
		}
		certs = append(certs, c)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	m.mu.RLock()
	pool, td, nroots := m.pool, m.trustDomain, len(m.roots)
	m.mu.RUnlock()
	if nroots == 0 {
		return "", fmt.Errorf("%w: %w", ErrUntrusted, ErrNoRoots)
	}
	opts := x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: m.now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	if _, err := certs[0].Verify(opts); err != nil {
		return "", fmt.Errorf("%w: %w", ErrUntrusted, err)
	}
	id, err := certIdentity(certs[0], td)
	if err != nil {
		return "", err
	}
	return id.Service, nil
}

// certIdentity extracts the single SPIFFE URI SAN of cert and checks the
// trust domain.
func certIdentity(cert *x509.Certificate, trustDomain string) (SpiffeID, error) {
	if len(cert.URIs) != 1 {
		return SpiffeID{}, fmt.Errorf("%w: certificate has %d URI SANs, want 1", ErrInvalidSpiffeID, len(cert.URIs))
	}
	id, err := ParseSpiffeID(cert.URIs[0].String())
	if err != nil {
		return SpiffeID{}, err
	}
	if id.TrustDomain != trustDomain {
		return SpiffeID{}, fmt.Errorf("%w: %s is not %s", ErrForeignTrustDomain, id.TrustDomain, trustDomain)
	}
	return id, nil
}

// Close stops renewal; Leaf and Rotate fail afterwards with ErrClosed.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	for _, t := range []*time.Timer{m.pruneTimer, m.pruneRetry} {
		if t != nil {
			t.Stop()
		}
	}
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	return nil
}

var errStaleRoot = errors.New("signing root was dropped")
