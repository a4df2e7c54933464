package meshstate

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/catalog"
)

// ErrRefused: the servers refused a registration write for good (the node
// may not register these services, or the request is malformed).
// Retrying the same registrations cannot succeed; a CatalogWriter wraps
// such answers with it and the Registrar stops retrying that allocation
// until its registrations change.
var ErrRefused = errors.New("registration refused by the servers")

// CatalogWriter writes this node's registrations to the servers: the
// etcd store directly on a server agent, the RPC client on a client agent.
// An error wrapping ErrRefused is final for those registrations.
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

// absentFP stands for "no registrations" where a fingerprint is kept.
const absentFP = "-"

// RegistrarConfig configures a Registrar.
type RegistrarConfig struct {
	Catalog *catalog.Catalog
	Writer  CatalogWriter
	// Mirror tells what the servers hold for this node (anti-entropy).
	Mirror *Mirror
	// Live reports whether an allocation still runs on this node, even if
	// it registered nothing here yet (a restored allocation whose services
	// hook has not run again). Anti-entropy removes from the servers only
	// allocations neither registered here nor live; an allocation that
	// stops is removed through DeregisterAlloc. nil: none is live.
	Live func(allocID string) bool
	// SyncInterval is the full anti-entropy period (default 30 s); changes
	// of check output alone reach the servers on this pass only.
	SyncInterval time.Duration
	Logger       hclog.Logger
}

// written is what the last successful write of an allocation held.
type written struct {
	fp   string // Fingerprint: without check output
	full string // fullFingerprint: with it
}

// Registrar keeps this node's service registrations: at once in the local
// catalog (the node's proxies never wait for the servers), and in the
// servers' catalog through the Writer, retried until it succeeds and
// repaired whenever the servers' copy differs (a node that was down had
// its registrations removed; a write lost to a server failure). It
// implements connecthook.Registrar.
//
// A change of check output alone (a check's text, not its status) is not
// written at once: it is written on the next full pass, so that checks
// whose output changes on every run cost no write per check interval.
type Registrar struct {
	cfg RegistrarConfig
	log hclog.Logger

	// mu guards the fields below and orders the local catalog's writes
	// with desired, so that the two cannot diverge.
	mu        sync.Mutex
	desired   map[string][]catalog.ServiceInstance // by alloc ID
	dirty     map[string]bool
	written   map[string]written // by alloc ID, after a successful PutAlloc
	inflight  map[string]string  // alloc ID -> fingerprint of the write under way (absentFP: a delete)
	refused   map[string]refusal // alloc ID -> what the servers refused, and when
	recompare bool               // the servers' copy changed: compare before the next sync
	started   bool
	kick      chan struct{}

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
		dirty: map[string]bool{}, written: map[string]written{}, inflight: map[string]string{}, refused: map[string]refusal{},
		kick: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	if cfg.Mirror != nil {
		cfg.Mirror.OnOwnChange(r.ownChanged)
	}
	return r
}

// Register adds or replaces one instance of this node.
func (r *Registrar) Register(inst catalog.ServiceInstance) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cfg.Catalog.Register(inst)
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
	fp := Fingerprint(list)
	if ref, ok := r.refused[inst.AllocID]; ok {
		if ref.holds(fp) {
			return
		}
		delete(r.refused, inst.AllocID)
	}
	if r.needsWriteLocked(inst.AllocID, fp) {
		r.dirty[inst.AllocID] = true
		r.Kick()
	}
}

// needsWriteLocked reports whether registrations of allocID with
// fingerprint fp differ, in more than check output, from what the write
// under way for it leaves on the servers or, with none, from what was
// last written (or, before any write, from what the servers hold).
func (r *Registrar) needsWriteLocked(allocID, fp string) bool {
	if f, ok := r.inflight[allocID]; ok {
		return f != fp
	}
	w, ok := r.lastWrittenLocked(allocID)
	return !ok || w.fp != fp
}

// lastWrittenLocked is what this registrar last wrote for allocID or,
// before its first write (after a restart), what the servers hold.
func (r *Registrar) lastWrittenLocked(allocID string) (written, bool) {
	if w, ok := r.written[allocID]; ok {
		return w, true
	}
	if m := r.cfg.Mirror; m != nil && isClosed(m.ready) {
		return m.ownWritten(allocID)
	}
	return written{}, false
}

// Deregister removes one instance of this node (a task's service while its
// task is not running); the allocation's other instances stay.
// catalog.ErrNotFound if it has no such instance.
func (r *Registrar) Deregister(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.cfg.Catalog.Deregister(id)
	for allocID, list := range r.desired {
		i := slices.IndexFunc(list, func(inst catalog.ServiceInstance) bool { return inst.ID == id })
		if i < 0 {
			continue
		}
		if len(list) == 1 {
			r.forgetLocked(allocID)
			return nil
		}
		list = slices.Delete(slices.Clone(list), i, i+1)
		r.desired[allocID] = list
		fp := Fingerprint(list)
		if ref, ok := r.refused[allocID]; ok {
			if ref.holds(fp) {
				return nil
			}
			delete(r.refused, allocID)
		}
		if r.needsWriteLocked(allocID, fp) {
			r.dirty[allocID] = true
			r.Kick()
		}
		return nil
	}
	return err
}

// DeregisterAlloc removes every instance of an allocation.
func (r *Registrar) DeregisterAlloc(allocID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cfg.Catalog.DeregisterAlloc(allocID)
	r.forgetLocked(allocID)
}

// forgetLocked drops an allocation's registrations and, when the servers
// may hold some, marks it for their removal there.
func (r *Registrar) forgetLocked(allocID string) {
	_, had := r.desired[allocID]
	_, wrote := r.written[allocID]
	delete(r.desired, allocID)
	if ref, ok := r.refused[allocID]; ok {
		if ref.holds(absentFP) {
			return
		}
		delete(r.refused, allocID)
	}
	onServers := false
	if m := r.cfg.Mirror; m != nil {
		_, onServers = m.OwnReg(allocID)
	}
	if had || wrote || onServers {
		r.dirty[allocID] = true
		r.Kick()
	}
}

// Kick asks the sync loop to write the dirty allocations now.
func (r *Registrar) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// ownChanged is the mirror's call after the servers' copy of this node's
// registrations changed: compare, then sync.
func (r *Registrar) ownChanged() {
	r.mu.Lock()
	r.recompare = true
	r.mu.Unlock()
	r.Kick()
}

// Start begins writing to the servers: call it once the node has
// recovered its allocations (Live then knows them).
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
	r.compare(true)
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
			r.mu.Lock()
			again := r.recompare
			r.recompare = false
			r.mu.Unlock()
			if again {
				r.compare(false)
			}
		case <-full.C:
			r.compare(true)
		case <-retry:
		}
	}
}

// compare marks dirty every allocation whose registrations on the
// servers differ from this node's (once the mirror has a whole state),
// and every allocation the servers hold that is neither registered here
// nor live. With outputs (the full pass) it also marks those whose check
// output changed since their last write.
func (r *Registrar) compare(outputs bool) {
	var own map[string]string
	if m := r.cfg.Mirror; m != nil && isClosed(m.ready) {
		own = m.OwnRegs()
	}
	var orphans []string
	r.mu.Lock()
	for id, insts := range r.desired {
		fp := Fingerprint(insts)
		if ref, ok := r.refused[id]; ok && ref.holds(fp) {
			continue
		}
		if cur, ok := own[id]; own != nil && (!ok || cur != fp) {
			r.dirty[id] = true
			continue
		}
		if w, ok := r.lastWrittenLocked(id); outputs && (!ok || w.full != fullFingerprint(insts)) {
			r.dirty[id] = true
		}
	}
	for id := range own {
		if _, ok := r.desired[id]; !ok && !r.refused[id].holds(absentFP) {
			orphans = append(orphans, id)
		}
	}
	r.mu.Unlock()
	// Live is asked without r.mu: it reads the client's allocations.
	for _, id := range orphans {
		if r.cfg.Live != nil && r.cfg.Live(id) {
			continue
		}
		r.mu.Lock()
		if _, ok := r.desired[id]; !ok {
			r.dirty[id] = true
		}
		r.mu.Unlock()
	}
}

// syncDirty writes every dirty allocation and returns how many failed
// (and are retried). An allocation the servers refused is not retried
// until its registrations change.
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
		if !r.dirty[id] {
			r.mu.Unlock()
			continue
		}
		insts, ok := r.desired[id]
		insts = append([]catalog.ServiceInstance(nil), insts...)
		delete(r.dirty, id)
		r.inflight[id] = absentFP
		if ok {
			r.inflight[id] = Fingerprint(insts)
		}
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(r.ctx, syncCallTimeout)
		var err error
		if ok {
			err = r.cfg.Writer.PutAlloc(ctx, id, insts)
		} else {
			err = r.cfg.Writer.DeleteAlloc(ctx, id)
		}
		cancel()
		if !r.synced(id, ok, insts, err) {
			failed++
		}
	}
	return failed
}

// synced records the outcome of one write of allocation id (insts, or a
// delete when !put) and reports whether it needs no retry.
func (r *Registrar) synced(id string, put bool, insts []catalog.ServiceInstance, err error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.inflight, id)
	fp := absentFP
	if put {
		fp = Fingerprint(insts)
	}
	switch {
	case err == nil:
		if put {
			r.written[id] = written{fp: fp, full: fullFingerprint(insts)}
		} else {
			delete(r.written, id)
		}
		return true
	case errors.Is(err, ErrRefused):
		if r.refused[id].fp != fp {
			r.log.Warn("the servers refused this allocation's service registrations; retrying only when they change or after a while",
				"alloc_id", id, "error", err, "retry_after", refusedRetry.String())
		}
		r.refused[id] = refusal{fp: fp, at: time.Now()}
		return true
	default:
		r.dirty[id] = true
		r.log.Warn("failed to sync service registrations to the servers; will retry", "alloc_id", id, "error", err)
		return false
	}
}

// refusedRetry is how long a refused registration is left alone: a
// refusal is for good when the allocation is gone or does not declare the
// service, but node credentials the servers briefly did not accept are
// refused the same way.
const refusedRetry = 10 * time.Minute

// refusal is a registration (by fingerprint; absentFP: a delete) the
// servers refused, and when.
type refusal struct {
	fp string
	at time.Time
}

// holds reports whether the refusal still applies to fp.
func (f refusal) holds(fp string) bool {
	return f.fp == fp && !f.at.IsZero() && time.Since(f.at) < refusedRetry
}
