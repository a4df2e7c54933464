package ca

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/meshlet/meshlet/internal/atomicfile"
	"github.com/meshlet/meshlet/internal/sealedjson"
)

const (
	stateFileName = "ca-state.json"
	// MarkerName is the file written at the first start of a CA dir; a
	// dir that has it held a CA.
	MarkerName = "ca.initialized"
)

// Sentinel errors of loading; test with errors.Is.
var (
	// ErrStateMissing: the directory held a CA (its marker or root keys
	// exist) but ca-state.json is gone. Starting anyway would make a new
	// trust domain that no running sidecar trusts.
	ErrStateMissing = errors.New("CA state is missing")
	// ErrStateCorrupt: ca-state.json cannot be decoded or fails its checksum.
	ErrStateCorrupt = errors.New("CA state is corrupt")
)

// stateFile is the persisted CA state. Private keys live in separate 0600
// files named by KeyFile; the state file itself is 0600 too.
type stateFile struct {
	Version   int `json:",omitempty"` // version 1 only; 2 keeps it in the envelope
	ClusterID string
	Index     uint64
	Roots     []rootState
}

type rootState struct {
	Root
	KeyFile      string
	RotatedOutAt time.Time `json:",omitempty"`
}

// loaded is what loadState read from a CA dir.
type loaded struct {
	st       *stateFile
	roots    []StoredRoot
	keyFiles map[string]string // root ID -> key file name
	marked   bool              // the marker exists
}

// loadState reads dir's state and keys; it writes nothing. It returns
// (nil, nil) when dir is new (no state file, no marker, no root key). A
// state file that is missing from a directory that held one, or is
// corrupt, is an error naming the file and how to recover: the CA never
// silently makes a new trust domain.
func loadState(dir string) (*loaded, error) {
	path, marker := filepath.Join(dir, stateFileName), filepath.Join(dir, MarkerName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		held, herr := heldState(dir)
		if herr != nil {
			return nil, herr
		}
		if held {
			return nil, fmt.Errorf("%w: %s was deleted from a directory that held the CA: restore %s from a backup, or remove %s and the root-*.key files to start a new trust domain", ErrStateMissing, path, dir, marker)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read CA state: %w", err)
	}
	l := &loaded{keyFiles: map[string]string{}}
	if l.st, err = decodeState(b); err != nil {
		return nil, fmt.Errorf("%w: %s: %w: restore %s from a backup", ErrStateCorrupt, path, err, dir)
	}
	for _, rs := range l.st.Roots {
		sr, err := loadRoot(dir, rs)
		if err != nil {
			sentinel := ErrStateCorrupt
			if errors.Is(err, fs.ErrNotExist) {
				sentinel = ErrStateMissing
			}
			return nil, fmt.Errorf("%w: %w: restore %s from a backup", sentinel, err, dir)
		}
		l.roots = append(l.roots, sr)
		l.keyFiles[rs.ID] = rs.KeyFile
	}
	switch _, err := os.Stat(marker); {
	case err == nil:
		l.marked = true
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("failed to check CA marker: %w", err)
	}
	return l, nil
}

// stored is the StoredState l holds, at revision rev.
func (l *loaded) stored(rev int64) *StoredState {
	return &StoredState{ClusterID: l.st.ClusterID, Index: l.st.Index, Roots: l.roots, Revision: rev}
}

// heldState reports whether dir shows signs of a CA: its marker or a root key.
func heldState(dir string) (bool, error) {
	_, err := os.Stat(filepath.Join(dir, MarkerName))
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("failed to check CA marker: %w", err)
	}
	keys, err := filepath.Glob(filepath.Join(dir, "root-*.key"))
	if err != nil {
		return false, fmt.Errorf("failed to list CA root keys: %w", err)
	}
	return len(keys) > 0, nil
}

// writeMarker writes dir's marker: from now on a lost state file is
// detected. dirStorage writes it once per process (see dirStorage.marked).
func writeMarker(dir string) error {
	msg := "This directory holds meshlet's CA: ca-state.json and root-*.key must exist next to this file.\n" +
		"Remove it (and the key files) only to start deliberately with a new trust domain (see docs/operations.md).\n"
	if err := atomicfile.WriteFile(filepath.Join(dir, MarkerName), []byte(msg), 0o600); err != nil {
		return fmt.Errorf("failed to write CA marker: %w", err)
	}
	return nil
}

// decodeState parses a state file of version 1 or 2.
func decodeState(b []byte) (*stateFile, error) {
	var st stateFile
	if err := sealedjson.Unmarshal(b, &st); err != nil {
		return nil, err
	}
	if st.ClusterID == "" {
		return nil, errors.New("no cluster ID")
	}
	st.Version = 0
	return &st, nil
}

// loadRoot reads rs's key file. The key is not parsed here: whoever uses
// the state parses it once (Manager.load, LoadDir through
// CheckStoredState).
func loadRoot(dir string, rs rootState) (StoredRoot, error) {
	if filepath.Base(rs.KeyFile) != rs.KeyFile || rs.KeyFile == "" {
		return StoredRoot{}, fmt.Errorf("failed to load root %s: bad key file name %q", rs.ID, rs.KeyFile)
	}
	kb, err := os.ReadFile(filepath.Join(dir, rs.KeyFile))
	if err != nil {
		return StoredRoot{}, fmt.Errorf("failed to read root key: %w", err)
	}
	return StoredRoot{Root: rs.Root, PrivateKeyPEM: string(kb), RotatedOutAt: rs.RotatedOutAt}, nil
}

// keyFileName names the key file of a root the directory does not know yet.
func keyFileName(r Root) string { return fmt.Sprintf("root-%016x.key", r.SerialNumber) }

// saveState writes the key files that do not exist yet (named by
// keyFiles, else keyFileName), then the state file atomically, and
// returns the key file of every root of the new state by root ID. When
// the state write fails, the key files it wrote are removed again (a
// first start on a full disk must not leave a key that looks like a CA
// whose state was lost), unless the new state did reach the disk.
func saveState(dir string, st stateFile, roots []StoredRoot, keyFiles map[string]string) (names map[string]string, err error) {
	var written []string
	defer func() {
		if err != nil {
			for _, path := range written {
				_ = os.Remove(path)
			}
		}
	}()
	st.Version = 0
	st.Roots = make([]rootState, 0, len(roots))
	names = make(map[string]string, len(roots))
	for _, r := range roots {
		name := keyFiles[r.ID]
		if name == "" {
			name = keyFileName(r.Root)
		}
		names[r.ID] = name
		st.Roots = append(st.Roots, rootState{Root: r.Root, KeyFile: name, RotatedOutAt: r.RotatedOutAt})
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err == nil {
			continue
		}
		if err := atomicfile.WriteFile(path, []byte(r.PrivateKeyPEM), 0o600); err != nil {
			return nil, fmt.Errorf("failed to persist CA root key: %w", err)
		}
		written = append(written, path)
	}
	b, err := sealedjson.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("failed to encode CA state: %w", err)
	}
	path := filepath.Join(dir, stateFileName)
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		if mayHold(path, b) {
			written = nil // the new state may be in place: keep its keys
		}
		return nil, fmt.Errorf("failed to persist CA state: %w", err)
	}
	return names, nil
}

// mayHold reports whether path may hold b after a failed atomic write (it
// was renamed in but the directory sync failed, or it cannot be read back).
func mayHold(path string, b []byte) bool {
	cur, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	return err != nil || bytes.Equal(cur, b)
}
