package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/atomicfile"
	"github.com/meshlet/meshlet/meshstate"
)

// The servers' RPC backend writes client agents' config entries (package
// rpc serves them when its ConnectBackend is a ConfigEntryWriter).
var _ meshstate.ConfigEntryWriter = connectBackend{}

// newMeshConfig is the agent's registry of the cluster's L7 config
// entries, which the mesh feed keeps current (Replace on every change; see
// startMeshFeed) and the control plane reads (xDS, authz, the API); and
// the writer of the API's writes: etcd on a server (the store checks
// every write against the stored entries), a call through a server on a
// client-only agent. The API waits until the registry has seen its write.
// A client-only agent starts from its cache of the last entries applied,
// so that restored proxies keep their routes before the feed arrives.
func (a *Agent) newMeshConfig() (*configentry.Registry, meshstate.ConfigEntryWriter) {
	reg := configentry.NewRegistry()
	a.mesh.configEntries = reg
	if a.mesh.store != nil {
		return reg, a.mesh.store
	}
	a.restoreConfigEntries(reg)
	return reg, a.rpcClient.ConnectConfigEntries()
}

// configCachePath keeps a client-only agent's last applied config entries.
func configCachePath(dataDir string) string {
	return filepath.Join(dataDir, "client", "mesh-config.json")
}

// configCache is the cache file: the entries as the feed carries them.
type configCache struct {
	Index   uint64
	Entries []meshstate.ConfigKV
}

// restoreConfigEntries loads the cache into reg. A missing cache is a
// first start; a corrupt one is logged and ignored whole (the servers'
// entries replace it).
func (a *Agent) restoreConfigEntries(reg *configentry.Registry) {
	path := configCachePath(a.cfg.DataDir)
	set, index, err := loadConfigCache(path)
	switch {
	case err == nil:
		reg.Replace(set, index)
		a.mesh.configIndex = index
		a.logger.Debug("restored the cached config entries", "path", path, "index", index, "count", set.Len())
	case errors.Is(err, fs.ErrNotExist):
	default:
		a.logger.Warn("ignoring the cached config entries; the servers' replace them", "path", path, "error", err)
	}
}

// cacheConfigEntries caches the set the mirror installed when its index
// changed; a failure only costs the next start the cache.
func (a *Agent) cacheConfigEntries(set *configentry.Set, index uint64) {
	if index == a.mesh.configIndex {
		return
	}
	path := configCachePath(a.cfg.DataDir)
	if err := saveConfigCache(path, set, index); err != nil {
		a.logger.Warn("failed to cache the cluster's config entries", "path", path, "error", err)
		return
	}
	a.mesh.configIndex = index
}

func saveConfigCache(path string, set *configentry.Set, index uint64) error {
	c := configCache{Index: index, Entries: []meshstate.ConfigKV{}}
	for _, e := range set.List("") {
		v, err := json.Marshal(e)
		if err != nil {
			return err
		}
		c.Entries = append(c.Entries, meshstate.ConfigKV{Key: configentry.KeyOf(e).String(),
			CreateIndex: e.GetCreateIndex(), ModifyIndex: e.GetModifyIndex(), Value: v})
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, b, 0o600)
}

func loadConfigCache(path string) (*configentry.Set, uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	var c configCache
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, 0, fmt.Errorf("failed to decode %s: %w", path, err)
	}
	entries := make([]configentry.Entry, 0, len(c.Entries))
	for _, kv := range c.Entries {
		e, err := meshstate.DecodeConfigValue(kv.Key, kv.Value, kv.CreateIndex, kv.ModifyIndex)
		if err != nil {
			return nil, 0, fmt.Errorf("failed to decode %s: %w", path, err)
		}
		entries = append(entries, e)
	}
	return configentry.NewSet(entries...), c.Index, nil
}
