package meshstate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/intention"
)

// MirrorConfig configures a Mirror.
type MirrorConfig struct {
	// Catalog is the agent's local catalog; the mirror keeps the other
	// nodes' registrations in it.
	Catalog *catalog.Catalog
	// Intentions is the agent's local intentions store (Replace-fed).
	Intentions *intention.Store
	// OnRoots is called with the CA's new public roots: a client agent
	// installs them (ca.Manager.SetRoots), a server reloads its CA from
	// etcd (ca.Manager.Reload). It must not block for long.
	OnRoots func(ca.Roots)
	// OnIntentions, when set, is called with every intentions state the
	// servers sent once it is applied (a client agent caches it).
	OnIntentions func(intention.State)
	// ConfigEntries, when set, is the agent's registry of config entries
	// (Replace-fed with every change, see ConfigBatch); OnConfig, when
	// set, is called with every set it installs (a client agent caches
	// it).
	ConfigEntries *configentry.Registry
	OnConfig      func(set *configentry.Set, index uint64)
	// SelfNode is this agent's node ID ("" on a server-only agent): its
	// registrations come from the Registrar, not from the feed.
	SelfNode string
	Logger   hclog.Logger
}

// Mirror applies the feed's batches to the agent's local control plane.
// Apply is called from one goroutine (the feed's); the read methods are
// safe for concurrent use.
type Mirror struct {
	cfg MirrorConfig
	log hclog.Logger

	mu     sync.Mutex
	rev    int64
	allocs map[string][]string // "<node>/<alloc>" -> instance IDs in the catalog (other nodes)
	own    map[string]written  // alloc ID -> fingerprints of this node's registrations in etcd
	ready  chan struct{}
	subs   []func()
}

// NewMirror returns a mirror that has applied nothing yet.
func NewMirror(cfg MirrorConfig) *Mirror {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Mirror{cfg: cfg, log: cfg.Logger.Named("mesh_mirror"), allocs: map[string][]string{},
		own: map[string]written{}, ready: make(chan struct{})}
}

// Ready is closed once the first whole state (a Reset batch) is applied.
func (m *Mirror) Ready() <-chan struct{} { return m.ready }

// Revision is the etcd revision of the last batch applied.
func (m *Mirror) Revision() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rev
}

// OwnRegs returns the fingerprints (Fingerprint) of this node's
// registrations as the servers hold them, by allocation ID.
func (m *Mirror) OwnRegs() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]string, len(m.own))
	for k, v := range m.own {
		out[k] = v.fp
	}
	return out
}

// OwnReg returns the fingerprint (Fingerprint) of one allocation of this
// node as the servers hold it, and whether they hold it.
func (m *Mirror) OwnReg(allocID string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.own[allocID]
	return w.fp, ok
}

// ownWritten is OwnReg with the fingerprint of the registrations'
// check output too.
func (m *Mirror) ownWritten(allocID string) (written, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.own[allocID]
	return w, ok
}

// OnOwnChange calls fn (without locks held) after every batch that
// changed this node's registrations as the servers hold them.
func (m *Mirror) OnOwnChange(fn func()) {
	m.mu.Lock()
	m.subs = append(m.subs, fn)
	m.mu.Unlock()
}

// Apply applies one batch. A batch with zero Revision (a keepalive) is
// ignored.
func (m *Mirror) Apply(b Batch) error {
	if b.Revision == 0 {
		return nil
	}
	ownChanged := m.applyAllocs(b)
	if b.Intentions != nil && m.cfg.Intentions != nil {
		if err := m.cfg.Intentions.Replace(*b.Intentions); err != nil {
			m.log.Error("refused the servers' intentions", "index", b.Intentions.Index, "error", err)
		} else if m.cfg.OnIntentions != nil {
			m.cfg.OnIntentions(*b.Intentions)
		}
	}
	m.applyConfig(b)
	if b.Roots != nil && m.cfg.OnRoots != nil {
		m.cfg.OnRoots(*b.Roots)
	}
	m.mu.Lock()
	m.rev = b.Revision
	subs := append([]func(){}, m.subs...)
	first := b.Reset && !isClosed(m.ready)
	if first {
		close(m.ready)
	}
	m.mu.Unlock()
	if ownChanged {
		for _, fn := range subs {
			fn()
		}
	}
	return nil
}

// applyAllocs applies the catalog part of b and reports whether this
// node's registrations changed.
func (m *Mirror) applyAllocs(b Batch) (ownChanged bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b.Reset {
		seen := map[string]bool{}
		for _, a := range b.Allocs {
			seen[a.NodeID+"/"+a.AllocID] = true
		}
		for key, ids := range m.allocs {
			if !seen[key] {
				m.replaceLocked(key, ids, nil)
			}
		}
		if len(m.own) > 0 {
			ownChanged = true
		}
		m.own = map[string]written{}
	}
	for _, a := range b.Allocs {
		if m.cfg.SelfNode != "" && a.NodeID == m.cfg.SelfNode {
			ownChanged = m.setOwnLocked(a) || ownChanged
			continue
		}
		key := a.NodeID + "/" + a.AllocID
		m.replaceLocked(key, m.allocs[key], a.Instances)
	}
	return ownChanged
}

func (m *Mirror) setOwnLocked(a AllocRegs) bool {
	old, had := m.own[a.AllocID]
	if a.Instances == nil {
		delete(m.own, a.AllocID)
		return had
	}
	w := written{fp: Fingerprint(a.Instances), full: fullFingerprint(a.Instances)}
	m.own[a.AllocID] = w
	return !had || old.fp != w.fp
}

// replaceLocked makes the catalog hold exactly insts for key, whose
// instances were oldIDs.
func (m *Mirror) replaceLocked(key string, oldIDs []string, insts []catalog.ServiceInstance) {
	keep := map[string]bool{}
	ids := make([]string, 0, len(insts))
	for _, inst := range insts {
		keep[inst.ID] = true
		ids = append(ids, inst.ID)
	}
	for _, id := range oldIDs {
		if !keep[id] {
			_ = m.cfg.Catalog.Deregister(id)
		}
	}
	for _, inst := range insts {
		if cur, ok := m.cfg.Catalog.Get(inst.ID); ok && sameInstance(cur, inst) {
			continue
		}
		m.cfg.Catalog.Register(inst)
	}
	if insts == nil {
		delete(m.allocs, key)
		return
	}
	m.allocs[key] = ids
}

// sameInstance compares everything but the modify index (check output
// included: other nodes' instances are shown as their node wrote them).
func sameInstance(a, b catalog.ServiceInstance) bool {
	return fullFingerprint([]catalog.ServiceInstance{a}) == fullFingerprint([]catalog.ServiceInstance{b})
}

// Fingerprint identifies a set of registrations regardless of order, of
// the catalog's modify indexes and of check output (a check's text; its
// status counts): anti-entropy compares these, and a change of output
// alone is written on the Registrar's full pass only.
func Fingerprint(insts []catalog.ServiceInstance) string {
	return fingerprint(insts, false)
}

// fullFingerprint is Fingerprint with check output.
func fullFingerprint(insts []catalog.ServiceInstance) string {
	return fingerprint(insts, true)
}

func fingerprint(insts []catalog.ServiceInstance, output bool) string {
	cp := make([]catalog.ServiceInstance, len(insts))
	copy(cp, insts)
	for i := range cp {
		cp[i].ModifyIndex = 0
		if !output && len(cp[i].Checks) > 0 {
			checks := append([]catalog.Check(nil), cp[i].Checks...)
			for j := range checks {
				checks[j].Output = ""
			}
			cp[i].Checks = checks
		}
	}
	sort.Slice(cp, func(i, j int) bool { return cp[i].ID < cp[j].ID })
	b, _ := json.Marshal(cp) // plain data: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
