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
	marked   bool              // the marker is known to exist
}

// NewDirStorage returns a Storage over dir for a CA that runs from it.
// It writes to dir even when only loading: Load and Save create dir
// (0700) when it is missing, and Load writes the ca.initialized marker
// when a state written before markers existed lacks it. To read a CA dir
// without changing anything (a one-time import), use LoadDir.
//
// A directory that held a CA but lost or corrupted its state fails Load
// with ErrStateMissing or ErrStateCorrupt instead of looking new. Load
// does not parse the root keys; the Manager does (New fails with
// ErrStateCorrupt on a bad key).
func NewDirStorage(dir string) Storage {
	return newDirStorage(dir, hclog.NewNullLogger())
}

func newDirStorage(dir string, logger hclog.Logger) *dirStorage {
	return &dirStorage{dir: dir, logger: logger, keyFiles: map[string]string{}}
}

// LoadDir reads the CA state of dir without creating or changing
// anything (for a one-time import into the cluster) and checks it as
// CheckStoredState does. A dir (or a path that does not exist) without a
// state file, marker or root key holds no CA: (nil, nil). A dir that held
// a CA but lost or corrupted its state is ErrStateMissing or
// ErrStateCorrupt, as New reports them.
func LoadDir(dir string) (*StoredState, error) {
	l, err := loadState(dir)
	if err != nil || l == nil {
		return nil, err
	}
	st := l.stored(1)
	if err := CheckStoredState(st); err != nil {
		return nil, fmt.Errorf("%w: restore %s from a backup", err, dir)
	}
	return st, nil
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
	l, err := loadState(d.dir)
	if err != nil || l == nil {
		d.rev, d.keyFiles, d.marked = 0, map[string]string{}, false
		return nil, err
	}
	d.marked = l.marked
	if err := d.ensureMarker(); err != nil {
		return nil, err
	}
	if d.rev == 0 {
		d.rev = 1
	}
	d.keyFiles = l.keyFiles
	return l.stored(d.rev), nil
}

// Save implements Storage: it writes the new roots' key files, then the
// state, then the marker (the first time), and removes the key files of
// roots next no longer has. Once the state is written Save succeeds: a
// failure to write the marker is logged and tried again at the next Save.
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
	keep, err := saveState(d.dir, stateFile{ClusterID: next.ClusterID, Index: next.Index}, next.Roots, d.keyFiles)
	if err != nil {
		return err
	}
	for id, name := range d.keyFiles {
		if _, ok := keep[id]; !ok {
			d.removeKeyFile(name)
		}
	}
	d.keyFiles = keep
	d.rev++
	next.Revision = d.rev
	if err := d.ensureMarker(); err != nil {
		d.logger.Warn("CA state saved but its marker is missing: a lost state file would not be detected", "dir", d.dir, "error", err)
	}
	return nil
}

// ensureMarker writes the marker unless it is known to exist.
func (d *dirStorage) ensureMarker() error {
	if d.marked {
		return nil
	}
	if err := writeMarker(d.dir); err != nil {
		return err
	}
	d.marked = true
	return nil
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
