package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/internal/atomicfile"
)

// intentionsCachePath keeps a client-only agent's last applied intentions,
// so that a restart enforces the cluster's deny intentions before the
// servers' feed arrives (an empty mirror would apply the default policy).
func intentionsCachePath(dataDir string) string {
	return filepath.Join(dataDir, "client", "mesh-intentions.json")
}

// restoreIntentions loads the cached intentions into ix, the client's
// mirror, before anything is served. A missing cache is a first start; a
// corrupt one is logged and ignored (the servers' state replaces it).
func (a *Agent) restoreIntentions(ix *intention.Store) {
	path := intentionsCachePath(a.cfg.DataDir)
	st, err := loadIntentions(path)
	if err == nil {
		err = ix.Replace(st)
	}
	switch {
	case err == nil:
		a.mesh.ixIndex = st.Index
		a.logger.Debug("restored the cached intentions", "path", path, "index", st.Index, "count", len(st.Intentions))
	case errors.Is(err, fs.ErrNotExist):
	default:
		a.logger.Warn("ignoring the cached intentions; the servers' replace them", "path", path, "error", err)
	}
}

// cacheIntentions caches the intentions state the mirror applied, when
// its index changed; a failure only costs the next start the cache.
func (a *Agent) cacheIntentions(st intention.State) {
	if st.Index == a.mesh.ixIndex {
		return
	}
	path := intentionsCachePath(a.cfg.DataDir)
	if err := saveIntentions(path, st); err != nil {
		a.logger.Warn("failed to cache the cluster's intentions", "path", path, "error", err)
		return
	}
	a.mesh.ixIndex = st.Index
}

func saveIntentions(path string, st intention.State) error {
	b, err := intention.EncodeState(st)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, b, 0o600)
}

func loadIntentions(path string) (intention.State, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return intention.State{}, err
	}
	st, err := intention.DecodeState(b)
	if err != nil {
		return intention.State{}, fmt.Errorf("failed to decode %s: %w", path, err)
	}
	return st, nil
}
