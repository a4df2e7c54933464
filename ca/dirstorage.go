package ca

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// dirStorage keeps one node's CA in a directory: ca-state.json (sealed
// JSON with a SHA-256), one 0600 key file per root and the ca.initialized
// marker. It is meant for one process: Save compares prev.Revision with a
// counter kept in memory, so two processes sharing a directory are not
// detected.
type dirStorage struct {
	dir    string
	logger hclog.Logger

	mu       sync.Mutex
	rev      int64             // revision of the state on disk as this process knows it; 0: none
	keyFiles map[string]string // root ID -> key file of the state on disk
}

// NewDirStorage returns a Storage over dir (created 0700 at the first
// Load or Save). A directory that held a CA but lost or corrupted its
// state fails Load with ErrStateMissing or ErrStateCorrupt instead of
// looking new.
func NewDirStorage(dir string) Storage {
	return newDirStorage(dir, hclog.NewNullLogger())
}

func newDirStorage(dir string, logger hclog.Logger) *dirStorage {
	return &dirStorage{dir: dir, logger: logger, keyFiles: map[string]string{}}
}

// Load implements Storage. Loading a state without a marker (written
// before markers existed) writes the marker.
func (d *dirStorage) Load(ctx context.Context) (*StoredState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create CA dir: %w", err)
	}
	st, roots, keyFiles, err := loadState(d.dir)
	if err != nil || st == nil {
		d.rev, d.keyFiles = 0, map[string]string{}
		return nil, err
	}
	if err := ensureMarker(d.dir); err != nil {
		return nil, err
	}
	if d.rev == 0 {
		d.rev = 1
	}
	d.keyFiles = keyFiles
	return &StoredState{ClusterID: st.ClusterID, Index: st.Index, Roots: roots, Revision: d.rev}, nil
}

// Save implements Storage: it writes the new roots' key files, then the
// state, then the marker, and removes the key files of roots next no
// longer has.
func (d *dirStorage) Save(ctx context.Context, prev, next *StoredState) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkPrev(prev); err != nil {
		return err
	}
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return fmt.Errorf("failed to create CA dir: %w", err)
	}
	if err := saveState(d.dir, stateFile{ClusterID: next.ClusterID, Index: next.Index}, next.Roots, d.keyFiles); err != nil {
		return err
	}
	keep := make(map[string]string, len(next.Roots))
	for _, r := range next.Roots {
		name := d.keyFiles[r.ID]
		if name == "" {
			name = keyFileName(r.Root)
		}
		keep[r.ID] = name
	}
	for id, name := range d.keyFiles {
		if _, ok := keep[id]; !ok {
			d.removeKeyFile(name)
		}
	}
	d.keyFiles = keep
	d.rev++
	next.Revision = d.rev
	return ensureMarker(d.dir)
}

// checkPrev returns ErrStateConflict unless prev is the state on disk.
func (d *dirStorage) checkPrev(prev *StoredState) error {
	if prev != nil {
		if d.rev == 0 || prev.Revision != d.rev {
			return fmt.Errorf("%w: revision %d is not the stored %d", ErrStateConflict, prev.Revision, d.rev)
		}
		return nil
	}
	_, err := os.Stat(filepath.Join(d.dir, stateFileName))
	switch {
	case err == nil:
		return fmt.Errorf("%w: %s exists", ErrStateConflict, filepath.Join(d.dir, stateFileName))
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("failed to check CA state: %w", err)
	}
	return nil
}

func (d *dirStorage) removeKeyFile(name string) {
	path := filepath.Join(d.dir, name)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.logger.Warn("failed to remove old root key", "path", path, "error", err)
	}
}
