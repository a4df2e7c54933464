package ca

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
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
	// Dir is the persistence directory (state and root keys, all 0600).
	// Empty keeps everything in memory (tests, benchmarks).
	Dir string
	// ClusterID is a UUID; generated and persisted on first start if empty.
	// A ClusterID that differs from the persisted one is an error.
	ClusterID  string
	Datacenter string        // default "dc1"
	LeafTTL    time.Duration // default 72h
	RootTTL    time.Duration // default 10 years
	// SignRate is leaf signings per second (default 50), with a burst of
	// the same size (at least 1).
	SignRate float64
	// RootOverlap is how long a rotated-out root stays trusted at least.
	// It is dropped only once this has passed AND every cached leaf has
	// been re-issued under the new root. Default: LeafTTL, so every leaf
	// the old root ever signed has expired by then and a peer that missed
	// the rotation (or holds a leaf fetched before it) keeps working.
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
// taken before Manager.mu, never after. Subscribers are called without any
// lock held.
type Manager struct {
	cfg         Config
	logger      hclog.Logger
	trustDomain string
	limiter     Limiter
	metrics     *metrics

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.RWMutex
	closed     bool
	index      uint64
	roots      []*rootCA // oldest first; exactly one is Active
	pool       *x509.CertPool
	leaves     map[string]*leafEntry
	unheld     int // entries with holds == 0
	renewers   atomic.Int64
	pruneTimer *time.Timer
	hub        pubsub.Hub[Event]

	// Hooks for tests; set before the first Leaf call.
	now       func() time.Time
	randFloat func() float64
}

// New loads the CA from cfg.Dir or creates it (cluster ID and an ECDSA
// P-256 root). reg may be nil.
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
		cfg:       cfg,
		logger:    logger.Named("ca"),
		limiter:   cfg.Limiter,
		metrics:   met,
		leaves:    map[string]*leafEntry{},
		now:       time.Now,
		randFloat: rand.Float64,
	}
	if m.limiter == nil {
		m.limiter = NewTokenBucket(cfg.SignRate, int(cfg.SignRate))
	}
	if err := m.load(); err != nil {
		return nil, err
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.rebuildPoolLocked()
	m.schedulePruneLocked()
	return m, nil
}

// load restores or initializes the cluster ID and roots.
func (m *Manager) load() error {
	var st *stateFile
	if m.cfg.Dir != "" {
		if err := os.MkdirAll(m.cfg.Dir, 0o700); err != nil {
			return fmt.Errorf("failed to create CA dir: %w", err)
		}
		var roots []*rootCA
		var err error
		st, roots, err = loadState(m.cfg.Dir)
		if err != nil {
			return err
		}
		if st != nil {
			if m.cfg.ClusterID != "" && m.cfg.ClusterID != st.ClusterID {
				return fmt.Errorf("failed to load CA state: cluster ID %s differs from the persisted %s", m.cfg.ClusterID, st.ClusterID)
			}
			m.cfg.ClusterID, m.index, m.roots = st.ClusterID, st.Index, roots
		}
	}
	if m.cfg.ClusterID == "" {
		m.cfg.ClusterID = uuid.NewString()
	}
	m.trustDomain = m.cfg.ClusterID + ".meshlet"
	expired := m.dropExpiredLocked(m.now())
	created := m.activeLocked() == nil
	if created {
		r, err := newRootCA(m.trustDomain, m.cfg.RootTTL, m.now())
		if err != nil {
			return err
		}
		m.index++
		r.Active, r.CreateIndex, r.ModifyIndex = true, m.index, m.index
		for _, old := range m.roots {
			old.Active, old.rotatedOutAt = false, m.now()
		}
		m.roots = append(m.roots, r)
	}
	if created || len(expired) > 0 {
		if err := m.persistLocked(); err != nil {
			return err
		}
		m.removeKeyFiles(expired)
	}
	if m.cfg.Dir != "" {
		if err := ensureMarker(m.cfg.Dir); err != nil {
			return err
		}
	}
	m.logger.Info("CA ready", "roots", len(m.roots), "created_root", created, "trust_domain", m.trustDomain)
	return nil
}

// persistLocked saves the state when a directory is configured.
func (m *Manager) persistLocked() error {
	if m.cfg.Dir == "" {
		return nil
	}
	return saveState(m.cfg.Dir, stateFile{ClusterID: m.cfg.ClusterID, Index: m.index}, m.roots)
}

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

// ClusterID is the cluster's UUID.
func (m *Manager) ClusterID() string { return m.cfg.ClusterID }

// Datacenter is the datacenter in identities.
func (m *Manager) Datacenter() string { return m.cfg.Datacenter }

// TrustDomain is "<cluster-uuid>.meshlet".
func (m *Manager) TrustDomain() string { return m.trustDomain }

// SpiffeID is the identity of service in this trust domain.
func (m *Manager) SpiffeID(service string) string {
	return SpiffeID{TrustDomain: m.trustDomain, Namespace: DefaultNamespace, Datacenter: m.cfg.Datacenter, Service: service}.URI()
}

// Roots returns every trusted root (during a rotation, old and new), the
// active one marked. It never contains private keys.
func (m *Manager) Roots() Roots {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := Roots{TrustDomain: m.trustDomain, Roots: make([]Root, 0, len(m.roots))}
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
	pool := m.pool
	m.mu.RUnlock()
	opts := x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: m.now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	if _, err := certs[0].Verify(opts); err != nil {
		return "", fmt.Errorf("%w: %w", ErrUntrusted, err)
	}
	id, err := m.certIdentity(certs[0])
	if err != nil {
		return "", err
	}
	return id.Service, nil
}

// certIdentity extracts the single SPIFFE URI SAN of cert and checks the
// trust domain.
func (m *Manager) certIdentity(cert *x509.Certificate) (SpiffeID, error) {
	if len(cert.URIs) != 1 {
		return SpiffeID{}, fmt.Errorf("%w: certificate has %d URI SANs, want 1", ErrInvalidSpiffeID, len(cert.URIs))
	}
	id, err := ParseSpiffeID(cert.URIs[0].String())
	if err != nil {
		return SpiffeID{}, err
	}
	if id.TrustDomain != m.trustDomain {
		return SpiffeID{}, fmt.Errorf("%w: %s is not %s", ErrForeignTrustDomain, id.TrustDomain, m.trustDomain)
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
	if m.pruneTimer != nil {
		m.pruneTimer.Stop()
	}
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	return nil
}

var errStaleRoot = errors.New("signing root was dropped")
