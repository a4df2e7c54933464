package consulapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/configentry"
)

// Config entries, Consul's /v1/config: PUT /v1/config (body: the entry,
// Pascal or snake keys; ?cas=N) answers true or false; GET
// /v1/config/{kind} lists a kind sorted by name; GET
// /v1/config/{kind}/{name} is 404 when absent; DELETE
// /v1/config/{kind}/{name} (?cas=N) answers true or false. Reads are
// served from the agent's registry and block on its index (?index=);
// writes go to the ConfigWriter, then wait (bounded) until the registry
// has seen them, so that a client reads its own write.

// configWriteTimeout bounds a write; configSeenTimeout the wait until the
// registry has seen it.
const (
	configWriteTimeout = 15 * time.Second
	configSeenTimeout  = 5 * time.Second
)

// ConfigEntries is the registry the API reads (*configentry.Registry).
type ConfigEntries interface {
	Current() (*configentry.Set, uint64)
	Subscribe(fn func(index uint64)) (cancel func())
}

// ConfigWriter writes config entries (meshstate.ConfigEntryWriter: the
// servers' store, or a call through a server). cas, when set, is a
// check-and-set on the entry's ModifyIndex (0: create only); ok false
// means it did not match and nothing changed. index is the config index
// the registry reaches once it has seen the write.
type ConfigWriter interface {
	PutConfigEntry(ctx context.Context, e configentry.Entry, cas *uint64) (ok bool, index uint64, err error)
	DeleteConfigEntry(ctx context.Context, k configentry.Key, cas *uint64) (ok bool, index uint64, err error)
}

var _ ConfigEntries = (*configentry.Registry)(nil)

func (s *Server) configRoutes(h map[string]http.HandlerFunc) {
	h["PUT /v1/config"] = s.configPut
	h["GET /v1/config/{kind}"] = s.configList
	h["GET /v1/config/{kind}/{name}"] = s.configGet
	h["DELETE /v1/config/{kind}/{name}"] = s.configDelete
}

// configDeps fills in the config entries' defaults: an empty registry,
// and over a *configentry.Registry without a writer, one that writes
// into it (a lone control plane keeps its entries in memory).
func configDeps(d Deps) Deps {
	if d.ConfigEntries == nil {
		d.ConfigEntries = configentry.NewRegistry()
	}
	if reg, ok := d.ConfigEntries.(*configentry.Registry); ok && d.ConfigWriter == nil {
		d.ConfigWriter = &memoryConfigWriter{reg: reg}
	}
	return d
}

// configFail answers config errors: the entries' refusals are 400.
func (s *Server) configFail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, configentry.ErrInvalid) || errors.Is(err, configentry.ErrConflict) ||
		errors.Is(err, configentry.ErrUnknownKind) {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	s.failFor(w, r, err)
}

// casParam reads ?cas= (nil when absent).
func casParam(r *http.Request) (*uint64, error) {
	raw, ok := r.URL.Query()["cas"]
	if !ok {
		return nil, nil
	}
	v, err := strconv.ParseUint(raw[0], 10, 64)
	if err != nil {
		return nil, badRequest("invalid cas %q", raw[0])
	}
	return &v, nil
}

// configKind reads the path's kind, refusing one meshlet does not serve.
func configKind(r *http.Request) (string, error) {
	kind := r.PathValue("kind")
	if !configentry.KnownKind(kind) {
		return "", fmt.Errorf("%w: %q (served: %v)", configentry.ErrUnknownKind, kind, configentry.Kinds)
	}
	return kind, nil
}

func (s *Server) configWait(r *http.Request) error {
	reg := s.d.ConfigEntries
	current := func() uint64 { _, i := reg.Current(); return i }
	return s.block(r, current, func(fn func()) func() { return reg.Subscribe(func(uint64) { fn() }) })
}

// PUT /v1/config
func (s *Server) configPut(w http.ResponseWriter, r *http.Request) {
	cas, err := casParam(r)
	if err != nil {
		s.failFor(w, r, err)
		return
	}
	var raw map[string]any
	if err := decodeBody(r, &raw); err != nil {
		s.failFor(w, r, err)
		return
	}
	e, err := configentry.Decode(raw)
	if err != nil {
		s.configFail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), configWriteTimeout)
	ok, index, err := s.d.ConfigWriter.PutConfigEntry(ctx, e, cas)
	cancel()
	if err != nil {
		s.configFail(w, r, err)
		return
	}
	s.configSeen(index)
	s.writeJSON(w, r, index, ok)
}

// DELETE /v1/config/{kind}/{name}
func (s *Server) configDelete(w http.ResponseWriter, r *http.Request) {
	kind, err := configKind(r)
	if err != nil {
		s.configFail(w, r, err)
		return
	}
	cas, err := casParam(r)
	if err != nil {
		s.failFor(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), configWriteTimeout)
	ok, index, err := s.d.ConfigWriter.DeleteConfigEntry(ctx, configentry.Key{Kind: kind, Name: r.PathValue("name")}, cas)
	cancel()
	if err != nil {
		s.configFail(w, r, err)
		return
	}
	s.configSeen(index)
	s.writeJSON(w, r, index, ok)
}

// GET /v1/config/{kind}
func (s *Server) configList(w http.ResponseWriter, r *http.Request) {
	kind, err := configKind(r)
	if err == nil {
		err = s.configWait(r)
	}
	if err != nil {
		s.configFail(w, r, err)
		return
	}
	set, index := s.d.ConfigEntries.Current()
	out := set.List(kind)
	if out == nil {
		out = []configentry.Entry{}
	}
	s.writeJSON(w, r, index, out)
}

// GET /v1/config/{kind}/{name}
func (s *Server) configGet(w http.ResponseWriter, r *http.Request) {
	kind, err := configKind(r)
	if err == nil {
		err = s.configWait(r)
	}
	if err != nil {
		s.configFail(w, r, err)
		return
	}
	set, index := s.d.ConfigEntries.Current()
	name := r.PathValue("name")
	e := set.Get(kind, name)
	if e == nil {
		setIndex(w, index)
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("config entry not found for %q / %q", kind, name))
		return
	}
	s.writeJSON(w, r, index, e)
}

// configSeen waits until the registry has seen index, at most
// configSeenTimeout (the write was made; later reads will see it).
func (s *Server) configSeen(index uint64) {
	reg := s.d.ConfigEntries
	if _, cur := reg.Current(); cur >= index {
		return
	}
	changed := make(chan struct{}, 1)
	cancel := reg.Subscribe(func(uint64) {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	defer cancel()
	timer := time.NewTimer(configSeenTimeout)
	defer timer.Stop()
	for {
		if _, cur := reg.Current(); cur >= index {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			s.logger.Warn("config entry write was made but this agent has not seen it yet", "index", index)
			return
		case <-s.done.Done():
			return
		}
	}
}

// memoryConfigWriter writes into a registry directly, with the checks the
// servers' store makes; its index counts the writes.
type memoryConfigWriter struct {
	mu  sync.Mutex
	reg *configentry.Registry
}

func (m *memoryConfigWriter) PutConfigEntry(_ context.Context, e configentry.Entry, cas *uint64) (bool, uint64, error) {
	if e == nil {
		return false, 0, fmt.Errorf("%w: no config entry", configentry.ErrInvalid)
	}
	if err := configentry.Validate(e); err != nil {
		return false, 0, err
	}
	if e.GetName() == "" {
		return false, 0, fmt.Errorf("%w: empty config entry name", configentry.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	set, index := m.reg.Current()
	cur := set.Get(e.GetKind(), e.GetName())
	if cas != nil && ((*cas == 0 && cur != nil) || (*cas != 0 && (cur == nil || cur.GetModifyIndex() != *cas))) {
		return false, index, nil
	}
	if err := set.Check(e); err != nil {
		return false, index, err
	}
	next := nextIndex(index)
	created := next
	if cur != nil {
		created = cur.GetCreateIndex()
	}
	stored, err := withIndexes(e, created, next)
	if err != nil {
		return false, index, err
	}
	m.reg.Replace(set.With(stored), next)
	return true, next, nil
}

// nextIndex is the index after one change of a store at index. An empty
// store's (0) first change makes it 2: X-Consul-Index reports 0 as 1
// (Consul never answers 0), and a blocking query on the empty store must
// see the first change as one.
func nextIndex(index uint64) uint64 { return max(index, 1) + 1 }

func (m *memoryConfigWriter) DeleteConfigEntry(_ context.Context, k configentry.Key, cas *uint64) (bool, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	set, index := m.reg.Current()
	cur := set.Get(k.Kind, k.Name)
	if cas != nil && (*cas == 0 || cur == nil || cur.GetModifyIndex() != *cas) {
		return false, index, nil
	}
	if cur == nil {
		return true, index, nil
	}
	if err := set.CheckDelete(k); err != nil {
		return false, index, err
	}
	next := nextIndex(index)
	m.reg.Replace(set.Without(k), next)
	return true, next, nil
}

// withIndexes returns a copy of e with its CreateIndex and ModifyIndex set.
func withIndexes(e configentry.Entry, create, modify uint64) (configentry.Entry, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", configentry.ErrInvalid, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %v", configentry.ErrInvalid, err)
	}
	m["CreateIndex"], m["ModifyIndex"] = create, modify
	if b, err = json.Marshal(m); err != nil {
		return nil, fmt.Errorf("%w: %v", configentry.ErrInvalid, err)
	}
	out, err := consul.MakeConfigEntry(e.GetKind(), "")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", configentry.ErrUnknownKind, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("%w: %v", configentry.ErrInvalid, err)
	}
	return out, nil
}
