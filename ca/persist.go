package ca

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

const (
	stateFileName = "ca-state.json"
	stateVersion  = 1
)

// stateFile is the persisted CA state. Private keys live in separate 0600
// files named by KeyFile; the state file itself is 0600 too.
type stateFile struct {
	Version   int
	ClusterID string
	Index     uint64
	Roots     []rootState
}

type rootState struct {
	Root
	KeyFile      string
	RotatedOutAt time.Time `json:",omitempty"`
}

// loadState reads dir's state and keys. It returns (nil, nil) when dir
// holds no state yet.
func loadState(dir string) (*stateFile, []*rootCA, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("failed to read CA state: %w", err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, nil, fmt.Errorf("failed to decode CA state %s: %w", filepath.Join(dir, stateFileName), err)
	}
	if st.Version != stateVersion {
		return nil, nil, fmt.Errorf("failed to load CA state: unsupported version %d", st.Version)
	}
	roots := make([]*rootCA, 0, len(st.Roots))
	for _, rs := range st.Roots {
		r, err := loadRoot(dir, rs)
		if err != nil {
			return nil, nil, err
		}
		roots = append(roots, r)
	}
	return &st, roots, nil
}

func loadRoot(dir string, rs rootState) (*rootCA, error) {
	cert, err := parseCertPEM(rs.RootCertPEM)
	if err != nil {
		return nil, fmt.Errorf("failed to load root %s: %w", rs.ID, err)
	}
	if filepath.Base(rs.KeyFile) != rs.KeyFile || rs.KeyFile == "" {
		return nil, fmt.Errorf("failed to load root %s: bad key file name %q", rs.ID, rs.KeyFile)
	}
	kb, err := os.ReadFile(filepath.Join(dir, rs.KeyFile))
	if err != nil {
		return nil, fmt.Errorf("failed to read root key: %w", err)
	}
	key, err := parseKeyPEM(kb)
	if err != nil {
		return nil, fmt.Errorf("failed to load root %s: %w", rs.ID, err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("failed to load root %s: key does not match certificate", rs.ID)
	}
	r := &rootCA{Root: rs.Root, cert: cert, key: key, keyFile: rs.KeyFile, rotatedOutAt: rs.RotatedOutAt}
	if len(rs.IntermediateCertsPEM) > 0 {
		cross, err := parseCertPEM(rs.IntermediateCertsPEM[0])
		if err != nil {
			return nil, fmt.Errorf("failed to load root %s cross-signed certificate: %w", rs.ID, err)
		}
		r.crossCert = cross
	}
	return r, nil
}

// saveState writes the key files that do not exist yet, then the state
// file atomically.
func saveState(dir string, st stateFile, roots []*rootCA) error {
	for _, r := range roots {
		if r.keyFile == "" {
			r.keyFile = fmt.Sprintf("root-%016x.key", r.SerialNumber)
		}
		path := filepath.Join(dir, r.keyFile)
		if _, err := os.Stat(path); err == nil {
			continue
		}
		kp, err := encodeKey(r.key)
		if err != nil {
			return err
		}
		if err := writeFileAtomic(path, []byte(kp)); err != nil {
			return err
		}
	}
	st.Version = stateVersion
	st.Roots = make([]rootState, 0, len(roots))
	for _, r := range roots {
		st.Roots = append(st.Roots, rootState{Root: r.Root, KeyFile: r.keyFile, RotatedOutAt: r.rotatedOutAt})
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("failed to encode CA state: %w", err)
	}
	return writeFileAtomic(filepath.Join(dir, stateFileName), b)
}

// writeFileAtomic writes data to a 0600 temp file in path's directory,
// syncs it and renames it over path.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("failed to create temp file: %w", err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return fmt.Errorf("failed to chmod %s: %w", tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("failed to write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("failed to sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("failed to close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("failed to rename %s: %w", tmp, err)
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
