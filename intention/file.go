package intention

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meshlet/meshlet/internal/atomicfile"
	"github.com/meshlet/meshlet/internal/sealedjson"
)

const (
	fileName = "intentions.json"
	// MarkerName is the file written at the first start of an intentions
	// dir; a dir that has it held intentions.
	MarkerName = "intentions.initialized"
)

// Sentinel errors of loading; test with errors.Is.
var (
	// ErrStateMissing: the directory held intentions (its marker file
	// exists) but intentions.json is gone.
	ErrStateMissing = errors.New("intentions state is missing")
	// ErrStateCorrupt: intentions.json cannot be decoded or fails its
	// checksum, or a state from the cluster (DecodeState, Store.Replace)
	// is invalid.
	ErrStateCorrupt = errors.New("intentions state is corrupt")
)

// persisted is the state inside the envelope (and the whole version 1 file).
type persisted struct {
	Index      uint64
	Intentions []Intention
}

// load reads dir's intentions. A directory without the state file and
// without the marker is new: it is initialized (an empty state file, then
// the marker). A missing state file in a directory that has the marker, an
// undecodable one or one that fails its checksum is an error naming the
// file and the way to recover: the store never starts empty in their place
// (that would fail open under a default-allow policy).
func load(dir string) (State, error) {
	st, found, hasMarker, err := readDir(dir)
	switch {
	case err != nil:
		return State{}, err
	case !found:
		if err := save(dir, nil, 0); err != nil {
			return State{}, err
		}
		return State{}, writeMarker(filepath.Join(dir, MarkerName))
	case !hasMarker: // written before markers existed
		if err := writeMarker(filepath.Join(dir, MarkerName)); err != nil {
			return State{}, err
		}
	}
	return st, nil
}

// LoadDir reads the intentions of a store's dir without creating or
// changing anything (for a one-time import into the cluster). A dir (or
// a path that does not exist) with neither the state file nor the marker
// holds no intentions: found is false. A marker without the state file is
// ErrStateMissing; an undecodable file or one that fails its checksum is
// ErrStateCorrupt, as New reports them.
func LoadDir(dir string) (st State, found bool, err error) {
	st, found, _, err = readDir(dir)
	return st, found, err
}

// readDir reads dir's state file, if any, and reports whether the marker
// exists; it writes nothing.
func readDir(dir string) (st State, found, hasMarker bool, err error) {
	path, marker := filepath.Join(dir, fileName), filepath.Join(dir, MarkerName)
	_, merr := os.Stat(marker)
	if merr != nil && !errors.Is(merr, fs.ErrNotExist) {
		return State{}, false, false, fmt.Errorf("failed to check intentions marker %s: %w", marker, merr)
	}
	hasMarker = merr == nil
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && hasMarker:
		return State{}, false, true, fmt.Errorf("%w: %s was deleted from a directory that held intentions: restore it from a backup, or remove %s to start with no intentions", ErrStateMissing, path, marker)
	case errors.Is(err, fs.ErrNotExist):
		return State{}, false, false, nil
	case err != nil:
		return State{}, false, hasMarker, fmt.Errorf("failed to read intentions %s: %w", path, err)
	}
	st, err = decode(b)
	if err != nil {
		return State{}, false, hasMarker, fmt.Errorf("%w: %s: %w: restore it from a backup, or remove it and %s to start with no intentions", ErrStateCorrupt, path, err, marker)
	}
	return st, true, hasMarker, nil
}

// decode parses and validates a state file of version 1 or 2.
func decode(b []byte) (State, error) {
	var p persisted
	if err := sealedjson.Unmarshal(b, &p); err != nil {
		return State{}, err
	}
	return validateState(State(p))
}

// encode renders list at index as a version 2 file.
func encode(list []*Intention, index uint64) ([]byte, error) {
	p := persisted{Index: index, Intentions: make([]Intention, 0, len(list))}
	for _, ix := range list {
		p.Intentions = append(p.Intentions, *ix)
	}
	b, err := sealedjson.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("failed to encode intentions: %w", err)
	}
	return b, nil
}

// save writes list at index to dir atomically (0600).
func save(dir string, list []*Intention, index uint64) error {
	b, err := encode(list, index)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, fileName), b, 0o600); err != nil {
		return fmt.Errorf("failed to persist intentions: %w", err)
	}
	return nil
}

func writeMarker(path string) error {
	msg := "This directory holds meshlet's intentions: intentions.json must exist next to this file.\n" +
		"Remove this file only to start deliberately with no intentions (see docs/operations.md).\n"
	if err := atomicfile.WriteFile(path, []byte(msg), 0o600); err != nil {
		return fmt.Errorf("failed to write intentions marker: %w", err)
	}
	return nil
}
