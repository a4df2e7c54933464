package meshstate

import (
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/meshlet/meshlet/configentry"
)

// ConfigBatch is the config entries' part of a feed batch: every stored
// entry in a Reset batch, else the entries that changed. Values travel as
// stored (the mirror decodes them), so that a corrupt one reaches each
// agent as such and is refused there rather than dropped on the way.
type ConfigBatch struct {
	// Index is the config index (config/index's modify revision) after
	// the batch; 0 when unknown (no config write through a Store yet).
	Index   uint64     `json:",omitempty"`
	Entries []ConfigKV `json:",omitempty"`
}

// ConfigKV is one stored entry, or its deletion.
type ConfigKV struct {
	// Key is "<kind>/<name>".
	Key         string
	CreateIndex uint64 `json:",omitempty"`
	ModifyIndex uint64 `json:",omitempty"`
	// Value is the stored JSON (DecodeConfigValue); nil when Deleted.
	Value   []byte `json:",omitempty"`
	Deleted bool   `json:",omitempty"`
}

// applyConfigKV records a key under config/ in b (sub is relative to the
// prefix); a later event of the same key replaces an earlier one.
func applyConfigKV(b *Batch, sub string, kv *mvccpb.KeyValue, deleted bool) {
	if b.Config == nil {
		b.Config = &ConfigBatch{}
	}
	if sub == configIndexKey {
		if !deleted {
			b.Config.Index = uint64(kv.ModRevision)
		}
		return
	}
	key, ok := strings.CutPrefix(sub, configEntriesDir)
	if !ok {
		return
	}
	e := ConfigKV{Key: key, Deleted: deleted}
	if !deleted {
		e.CreateIndex, e.ModifyIndex, e.Value = uint64(kv.CreateRevision), uint64(kv.ModRevision), kv.Value
	}
	for i := range b.Config.Entries {
		if b.Config.Entries[i].Key == key {
			b.Config.Entries[i] = e
			return
		}
	}
	b.Config.Entries = append(b.Config.Entries, e)
}

// applyConfig feeds the config part of b to the registry: a Reset
// replaces the whole set, a change edits the current one. An entry that
// does not decode is logged and the registry keeps its last good version
// of it (never a silent drop: the error names the key).
func (m *Mirror) applyConfig(b Batch) {
	reg := m.cfg.ConfigEntries
	if reg == nil || b.Config == nil {
		return
	}
	cur, curIndex := reg.Current()
	index := b.Config.Index
	if index == 0 && !b.Reset {
		index = max(uint64(b.Revision), curIndex)
	}
	var next *configentry.Set
	if b.Reset {
		var entries []configentry.Entry
		for _, kv := range b.Config.Entries {
			if e := m.decodeConfig(kv, cur); e != nil {
				entries = append(entries, e)
			}
		}
		next = configentry.NewSet(entries...)
	} else {
		next = cur
		for _, kv := range b.Config.Entries {
			if kv.Deleted {
				kind, name, _ := strings.Cut(kv.Key, "/")
				next = next.Without(configentry.Key{Kind: kind, Name: name})
			} else if e := m.decodeConfig(kv, nil); e != nil {
				next = next.With(e)
			}
		}
	}
	reg.Replace(next, index)
	if m.cfg.OnConfig != nil {
		m.cfg.OnConfig(next, index)
	}
}

// decodeConfig decodes one stored entry; on failure it logs and returns
// the entry of that key in keep (nil when none, or for a delta batch,
// where the current set keeps it anyway).
func (m *Mirror) decodeConfig(kv ConfigKV, keep *configentry.Set) configentry.Entry {
	e, err := DecodeConfigValue(kv.Key, kv.Value, kv.CreateIndex, kv.ModifyIndex)
	if err == nil {
		return e
	}
	m.log.Error("refused a stored config entry that does not decode; keeping its last good version",
		"entry", kv.Key, "modify_index", kv.ModifyIndex, "error", err)
	kind, name, _ := strings.Cut(kv.Key, "/")
	return keep.Get(kind, name)
}
