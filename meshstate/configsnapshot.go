package meshstate

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Config entries in snapshots: every key under config/ is durable state
// (the entries and config/index). A restore writes the snapshot's entries
// and, when they differ from the live ones, a new config/index value, so
// that its modify revision (the config index) moves and blocking queries
// and mirrors see the change.

// restoredIndexPrefix starts the config/index value a restore writes.
const restoredIndexPrefix = "restored:"

// checkConfigDurable validates a snapshot's keys under config/ (relative
// to the prefix): each entry decodes under its key; it returns how many
// entries there are. Errors wrap ErrInvalid and name the key.
func checkConfigDurable(snap map[string][]byte) (int, error) {
	n := 0
	for k, v := range snap {
		if k == configIndexKey {
			continue
		}
		rest, ok := strings.CutPrefix(k, configEntriesDir)
		if !ok {
			return 0, fmt.Errorf("%w: snapshot key %q is not durable mesh state", ErrInvalid, k)
		}
		if _, err := DecodeConfigValue(rest, v, 1, 1); err != nil {
			return 0, fmt.Errorf("%w: snapshot key %s: %w", ErrInvalid, k, err)
		}
		n++
	}
	return n, nil
}

// restoredConfig adds to out the config keys a restore writes: snap's
// entries, and config/index: live's when the entries are live's, else a
// value of the snapshot's entries that differs from live's.
func restoredConfig(snap, live, out map[string][]byte) {
	se, le := configEntryKeys(snap), configEntryKeys(live)
	for k, v := range se {
		out[k] = v
	}
	if sameKVs(se, le) {
		if v, ok := live[configIndexKey]; ok {
			out[configIndexKey] = v
		}
		return
	}
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(se)) {
		fmt.Fprintf(h, "%s\x00%s\x00", k, se[k])
	}
	v := []byte(restoredIndexPrefix + hex.EncodeToString(h.Sum(nil)))
	if bytes.Equal(v, live[configIndexKey]) {
		v = append(v, '+') // live's must change for the index to move
	}
	out[configIndexKey] = v
}

// configEntryKeys are the keys under config/entries/ of kvs.
func configEntryKeys(kvs map[string][]byte) map[string][]byte {
	out := map[string][]byte{}
	for k, v := range kvs {
		if strings.HasPrefix(k, configEntriesDir) {
			out[k] = v
		}
	}
	return out
}

func sameKVs(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}
