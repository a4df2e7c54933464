package meshstate

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/catalog"
)

// CatalogWriter writes this node's registrations to the servers: the
// etcd store directly on a server agent, the RPC client on a client agent.
type CatalogWriter interface {
	PutAlloc(ctx context.Context, allocID string, insts []catalog.ServiceInstance) error
	DeleteAlloc(ctx context.Context, allocID string) error
}

// Defaults of RegistrarConfig.
const (
	DefaultSyncInterval = 30 * time.Second
	maxSyncBackoff      = 30 * time.Second
	syncCallTimeout     = 10 * time.Second
)

// RegistrarConfig configures a Registrar.
type RegistrarConfig struct {
	Catalog *catalog.Catalog
	Writer  CatalogWriter
	// Mirror tells what the servers hold for this node (anti-entropy).
	Mirror *Mirror
	// SyncInterval is the full anti-entropy period (default 30 s).
	SyncInterval time.Duration
	Logger       hclog.Logger
}

// Registrar keeps this node's service registrations: at once in the local
// catalog (the node's proxies never wait for the servers), and in the
// servers' catalog through the Writer, retried until it succeeds and
// repaired whenever the servers' copy differs (a node that was down had
// its registrations removed; a write lost to a server failure). It
// implements connecthook.Registrar.
type Registrar struct {
	cfg RegistrarConfig
	log hclog.Logger

	mu      sync.Mutex
	desired map[string][]catalog.ServiceInstance // by alloc ID
	dirty   map[string]bool
	started bool
	kick    chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// NewRegistrar returns a registrar; nothing is written to the servers
// until Start.
func NewRegistrar(cfg RegistrarConfig) *Registrar {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = DefaultSyncInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Registrar{cfg: cfg, log: cfg.Logger.Named("mesh_registrar"), desired: map[string][]catalog.ServiceInstance{},
		dirty: map[string]bool{}, kick: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	if cfg.Mirror != nil {
		cfg.Mirror.OnOwnChange(r.Kick)
	}
	return r
}

// Register adds or replaces one instance of this node.
func (r *Registrar) Register(inst catalog.ServiceInstance) {
	r.cfg.Catalog.Register(inst)
	r.mu.Lock()
	list := r.desired[inst.AllocID]
	replaced := false
	for i := range list {
		if list[i].ID == inst.ID {
			list[i], replaced = inst, true
		}
	}
	if !replaced {
		list = append(list, inst)
	}
	r.desired[inst.AllocID] = list
	r.dirty[inst.AllocID] = true
	r.mu.Unlock()
	r.Kick()
}

// DeregisterAlloc removes every instance of an allocation.
func (r *Registrar) DeregisterAlloc(allocID string) {
	r.cfg.Catalog.DeregisterAlloc(allocID)
	r.mu.Lock()
	_, had := r.desired[allocID]
	delete(r.desired, allocID)
	r.dirty[allocID] = true
	r.mu.Unlock()
	if had {
		r.Kick()
	}
}

// Kick asks for a sync pass now.
func (r *Registrar) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Start begins writing to the servers: call it once the node has
// recovered its allocations, so that registrations of allocations still
// being restored are not removed by anti-entropy.
func (r *Registrar) Start() {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return
	}
	r.started = true
	r.mu.Unlock()
	go r.loop()
}

// Stop ends the sync loop; registrations stay where they are.
func (r *Registrar) Stop() {
	r.cancel()
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	if started {
		<-r.done
	}
}

func (r *Registrar) loop() {
	defer close(r.done)
	backoff := time.Second
	full := time.NewTicker(r.cfg.SyncInterval)
	defer full.Stop()
	r.compare()
	for {
		wait := time.Duration(0)
		if failed := r.syncDirty(); failed > 0 {
			wait = backoff
			backoff = min(2*backoff, maxSyncBackoff)
		} else {
			backoff = time.Second
		}
		var retry <-chan time.Time
		if wait > 0 {
			retry = time.After(wait)
		}
		select {
		case <-r.ctx.Done():
			return
		case <-r.kick:
			r.compare()
		case <-full.C:
			r.compare()
		case <-retry:
		}
	}
}

// compare marks dirty every allocation whose registrations on the
// servers differ from this node's (once the mirror has a whole state).
func (r *Registrar) compare() {
	m := r.cfg.Mirror
	if m == nil || !isClosed(m.ready) {
		return
	}
	own := m.OwnRegs()
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, insts := range r.desired {
		if own[id] != Fingerprint(insts) {
			r.dirty[id] = true
		}
	}
	for id := range own {
		if _, ok := r.desired[id]; !ok {
			r.dirty[id] = true
		}
	}
}

// syncDirty writes every dirty allocation and returns how many failed.
func (r *Registrar) syncDirty() (failed int) {
	r.mu.Lock()
	ids := make([]string, 0, len(r.dirty))
	for id := range r.dirty {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	sort.Strings(ids)
	for _, id := range ids {
		if r.ctx.Err() != nil {
			return failed
		}
		r.mu.Lock()
		insts, ok := r.desired[id]
		insts = append([]catalog.ServiceInstance(nil), insts...)
		delete(r.dirty, id)
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(r.ctx, syncCallTimeout)
		var err error
		if ok {
			err = r.cfg.Writer.PutAlloc(ctx, id, insts)
		} else {
			err = r.cfg.Writer.DeleteAlloc(ctx, id)
		}
		cancel()
		if err != nil {
			failed++
			r.mu.Lock()
			r.dirty[id] = true
			r.mu.Unlock()
			r.log.Warn("failed to sync service registrations to the servers; will retry", "alloc_id", id, "error", err)
		}
	}
	return failed
}
