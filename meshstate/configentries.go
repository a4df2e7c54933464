package meshstate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	consul "github.com/hashicorp/consul/api"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/configentry"
)

// L7 config entries (package configentry) are kept one key per entry:
//
//	config/entries/<kind>/<name>  the entry, consul/api's JSON
//	config/index                  bumped by every config write
//
// An entry's CreateIndex and ModifyIndex are its key's etcd create and
// modify revisions; the config index (blocking queries, the Registry's
// index) is config/index's modify revision. Every write reads all
// entries at one revision, checks the new state (configentry.Validate,
// Set.Check or Set.CheckDelete) and commits only if config/index did not
// move since: a write is checked against exactly the entries it lands
// beside, deletions included.
const (
	configDir        = "config/"
	configEntriesDir = "config/entries/"
	configIndexKey   = "config/index"
)

// ErrConfigCorrupt: a stored config entry does not decode (it names its
// key). Reads and writes fail rather than act on the entries without it.
var ErrConfigCorrupt = errors.New("stored config entry is corrupt")

// ConfigEntryWriter writes the cluster's config entries: the servers'
// Store, or a client agent's call through a server (package rpc). cas,
// when set, is a check-and-set on the entry's ModifyIndex (0: only if
// absent); a write whose cas does not match changes nothing and returns
// ok false. index is the config index after the call (the write's own
// revision when it changed something). Errors wrap configentry's
// sentinels (ErrInvalid, ErrConflict, ErrUnknownKind) when the entries
// refuse the write.
type ConfigEntryWriter interface {
	PutConfigEntry(ctx context.Context, e configentry.Entry, cas *uint64) (ok bool, index uint64, err error)
	DeleteConfigEntry(ctx context.Context, k configentry.Key, cas *uint64) (ok bool, index uint64, err error)
}

var _ ConfigEntryWriter = (*Store)(nil)

// configKey is the key of an entry, relative to the prefix.
func configKey(k configentry.Key) string { return configEntriesDir + k.Kind + "/" + k.Name }

// checkConfigKey refuses a kind or name that cannot be a key segment.
func checkConfigKey(k configentry.Key) error {
	if !configentry.KnownKind(k.Kind) {
		return fmt.Errorf("%w: %q", configentry.ErrUnknownKind, k.Kind)
	}
	if err := checkSegment("config entry name", k.Name); err != nil {
		return fmt.Errorf("%w: %w", configentry.ErrInvalid, err)
	}
	return nil
}

// configState is the stored config entries read at one revision.
type configState struct {
	set   *configentry.Set
	index uint64 // config/index's modify revision, 0 when never written
	guard int64  // config/index's modify revision (0: absent), for the compare
}

// ConfigEntries returns every stored entry and the config index (0 when
// none was ever written). A corrupt entry is an error (ErrConfigCorrupt).
func (s *Store) ConfigEntries(ctx context.Context) (*configentry.Set, uint64, error) {
	st, err := s.readConfig(ctx)
	if err != nil {
		return nil, 0, err
	}
	return st.set, st.index, nil
}

func (s *Store) readConfig(ctx context.Context) (configState, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, s.key(configDir), clientv3.WithPrefix())
	if err != nil {
		return configState{}, fmt.Errorf("failed to read config entries: %w", err)
	}
	st := configState{}
	var entries []configentry.Entry
	for _, kv := range resp.Kvs {
		sub := strings.TrimPrefix(string(kv.Key), s.prefix)
		if sub == configIndexKey {
			st.guard, st.index = kv.ModRevision, uint64(kv.ModRevision)
			continue
		}
		e, err := s.decodeConfigKV(kv)
		if err != nil {
			return configState{}, err
		}
		if e != nil {
			entries = append(entries, e)
		}
	}
	st.set = configentry.NewSet(entries...)
	return st, nil
}

// PutConfigEntry validates e (configentry.Validate, which normalizes it,
// then Set.Check against the stored entries) and stores it.
func (s *Store) PutConfigEntry(ctx context.Context, e configentry.Entry, cas *uint64) (bool, uint64, error) {
	if e == nil {
		return false, 0, fmt.Errorf("%w: no config entry", configentry.ErrInvalid)
	}
	if err := configentry.Validate(e); err != nil {
		return false, 0, err
	}
	k := configentry.KeyOf(e)
	if err := checkConfigKey(k); err != nil {
		return false, 0, err
	}
	val, err := encodeConfigEntry(e)
	if err != nil {
		return false, 0, err
	}
	what := "write config entry " + k.String()
	return s.updateConfig(ctx, what, k, cas, false, func(st configState) error { return st.set.Check(e) },
		clientv3.OpPut(s.key(configKey(k)), string(val)))
}

// DeleteConfigEntry removes the entry k when nothing needs it
// (Set.CheckDelete). Deleting an absent entry is no error (ok true,
// nothing written) unless cas is set: a cas delete needs the entry at
// that ModifyIndex (a cas of 0 never deletes, as Consul's).
func (s *Store) DeleteConfigEntry(ctx context.Context, k configentry.Key, cas *uint64) (bool, uint64, error) {
	if err := checkConfigKey(k); err != nil {
		return false, 0, err
	}
	what := "delete config entry " + k.String()
	return s.updateConfig(ctx, what, k, cas, true, func(st configState) error { return st.set.CheckDelete(k) },
		clientv3.OpDelete(s.key(configKey(k))))
}

// updateConfig runs one checked write, again when another write moved
// config/index between the read and the commit.
func (s *Store) updateConfig(ctx context.Context, what string, k configentry.Key, cas *uint64, del bool,
	check func(configState) error, op clientv3.Op) (bool, uint64, error) {
	if err := s.writable(what); err != nil {
		return false, 0, err
	}
	for try := 0; try < maxWriteTries; try++ {
		if !retryWait(ctx, try) {
			return false, 0, fmt.Errorf("failed to %s: %w", what, ctx.Err())
		}
		st, err := s.readConfig(ctx)
		if err != nil {
			return false, 0, fmt.Errorf("failed to %s: %w", what, err)
		}
		cur := st.set.Get(k.Kind, k.Name)
		if !casMatches(cur, cas, del) {
			return false, st.index, nil
		}
		if del && cur == nil {
			return true, st.index, nil
		}
		if err := check(st); err != nil {
			return false, st.index, err
		}
		rev, ok, err := s.commitConfig(ctx, what, st.guard, op)
		if err != nil || ok {
			return ok, rev, err
		}
		s.logger.Debug("config entry write lost a race; retrying", "try", try+1, "entry", k.String())
	}
	return false, 0, fmt.Errorf("failed to %s: %w after %d tries", what, ErrConflict, maxWriteTries)
}

// casMatches applies a check-and-set index to the current entry.
func casMatches(cur configentry.Entry, cas *uint64, del bool) bool {
	switch {
	case cas == nil:
		return true
	case *cas == 0:
		return !del && cur == nil
	default:
		return cur != nil && cur.GetModifyIndex() == *cas
	}
}

// commitConfig applies op and bumps config/index unless config/index
// moved past guard; ok is false when it did.
func (s *Store) commitConfig(ctx context.Context, what string, guard int64, op clientv3.Op) (uint64, bool, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	ik := s.key(configIndexKey)
	cmp := clientv3.Compare(clientv3.ModRevision(ik), "=", guard)
	if guard == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(ik), "=", 0)
	}
	resp, err := s.c.Txn(ctx).If(cmp).Then(op, clientv3.OpPut(ik, strings.TrimPrefix(string(op.KeyBytes()), s.key(configEntriesDir)))).Commit()
	if err != nil {
		return 0, false, fmt.Errorf("failed to %s: %w", what, err)
	}
	return uint64(resp.Header.Revision), resp.Succeeded, nil
}

// encodeConfigEntry is the stored value of e: consul/api's JSON without
// the indexes (they are the key's revisions).
func encodeConfigEntry(e configentry.Entry) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("%w: failed to encode config entry: %v", configentry.ErrInvalid, err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: failed to encode config entry: %v", configentry.ErrInvalid, err)
	}
	delete(m, "CreateIndex")
	delete(m, "ModifyIndex")
	return json.Marshal(m)
}

// decodeConfigKV decodes a key under config/entries/ (nil for any other
// key); an error wraps ErrConfigCorrupt and names the key.
func (s *Store) decodeConfigKV(kv *mvccpb.KeyValue) (configentry.Entry, error) {
	sub := strings.TrimPrefix(string(kv.Key), s.prefix)
	rest, ok := strings.CutPrefix(sub, configEntriesDir)
	if !ok {
		return nil, nil
	}
	e, err := DecodeConfigValue(rest, kv.Value, uint64(kv.CreateRevision), uint64(kv.ModRevision))
	if err != nil {
		return nil, fmt.Errorf("etcd key %s: %w", kv.Key, err)
	}
	return e, nil
}

// DecodeConfigValue decodes a stored entry: key is "<kind>/<name>" (its
// key under config/entries/, as ConfigKV.Key), and the indexes are the
// key's create and modify revisions. Errors wrap ErrConfigCorrupt.
func DecodeConfigValue(key string, value []byte, createIndex, modifyIndex uint64) (configentry.Entry, error) {
	kind, name, ok := strings.Cut(key, "/")
	if !ok {
		return nil, fmt.Errorf("%w: key %q is not <kind>/<name>", ErrConfigCorrupt, key)
	}
	e, err := consul.MakeConfigEntry(kind, "")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfigCorrupt, err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(value, &m); err != nil || m == nil {
		return nil, fmt.Errorf("%w: not a JSON object: %v", ErrConfigCorrupt, err)
	}
	m["CreateIndex"], _ = json.Marshal(createIndex)
	m["ModifyIndex"], _ = json.Marshal(modifyIndex)
	b, _ := json.Marshal(m) // raw messages that decoded: cannot fail
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(e); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfigCorrupt, err)
	}
	if e.GetKind() != kind || e.GetName() != name {
		return nil, fmt.Errorf("%w: the value is entry %s/%s", ErrConfigCorrupt, e.GetKind(), e.GetName())
	}
	return e, nil
}
