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
	// checksum.
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
func load(dir string) ([]*Intention, uint64, error) {
	path, marker := filepath.Join(dir, fileName), filepath.Join(dir, MarkerName)
	_, merr := os.Stat(marker)
	if merr != nil && !errors.Is(merr, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("failed to check intentions marker %s: %w", marker, merr)
	}
	hasMarker := merr == nil
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && hasMarker:
		return nil, 0, fmt.Errorf("%w: %s was deleted from a directory that held intentions: restore it from a backup, or remove %s to start with no intentions", ErrStateMissing, path, marker)
	case errors.Is(err, fs.ErrNotExist):
		if err := save(dir, nil, 0); err != nil {
			return nil, 0, err
		}
		return nil, 0, writeMarker(marker)
	case err != nil:
		return nil, 0, fmt.Errorf("failed to read intentions %s: %w", path, err)
	}
	list, index, err := decode(b)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %s: %w: restore it from a backup, or remove it and %s to start with no intentions", ErrStateCorrupt, path, err, marker)
	}
	if !hasMarker { // written before markers existed
		if err := writeMarker(marker); err != nil {
			return nil, 0, err
		}
	}
	return list, index, nil
}

// decode parses and validates a state file of version 1 or 2.
func decode(b []byte) ([]*Intention, uint64, error) {
	var p persisted
	if err := sealedjson.Unmarshal(b, &p); err != nil {
		return nil, 0, err
	}
	ids, pairs := map[string]bool{}, map[pairKey]bool{}
	list := make([]*Intention, 0, len(p.Intentions))
	for _, in := range p.Intentions {
		ix, err := normalize(in)
		if err != nil {
			return nil, 0, fmt.Errorf("intention %s: %w", in.ID, err)
		}
		k := pairKey{ix.SourceName, ix.DestinationName}
		if ix.ID == "" || ids[ix.ID] || pairs[k] {
			return nil, 0, fmt.Errorf("missing or duplicate ID or pair at %s", ix)
		}
		ids[ix.ID], pairs[k] = true, true
		list = append(list, &ix)
	}
	return list, p.Index, nil
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
