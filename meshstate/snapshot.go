package meshstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/intention"
)

// ErrOtherCA: a snapshot's CA has another cluster ID (trust domain) than
// the CA stored now; restoring it cuts off every sidecar that trusts the
// current one.
var ErrOtherCA = errors.New("the snapshot's CA is of another trust domain")

// DurableKeys are the key ranges (prefixes relative to the store's prefix,
// in key order) that a backup of the mesh state carries: the CA (ca/roots
// and every root's private key under ca/keys/), the config entries
// (config/) and the intentions. The catalog registrations (catalog/) are
// not durable state: each node's Registrar writes its own again within
// its sync interval (anti-entropy), so a restore leaves them as they are.
func DurableKeys() []string { return []string{caDir, configDir, intentionsKey} }

// SnapshotInfo describes the durable mesh state of a snapshot.
type SnapshotInfo struct {
	// ClusterID is the CA's ("" when the snapshot carries no CA).
	ClusterID    string
	ActiveRootID string
	Roots        int
	// Intentions counts the intentions (0 also when none were stored).
	Intentions int
	// ConfigEntries counts the config entries.
	ConfigEntries int
	// PreviousClusterID is set by PrepareRestore when the snapshot's CA
	// replaces one of another cluster ID (allowOtherCA): the stored CA's.
	PreviousClusterID string
}

// TrustDomain is the CA's trust domain ("" without a CA).
func (i SnapshotInfo) TrustDomain() string {
	if i.ClusterID == "" {
		return ""
	}
	return ca.TrustDomainOf(i.ClusterID)
}

// CheckDurable validates the durable keys of a snapshot (keys relative to
// the store's prefix, as DurableKeys selects them): only known keys; the
// config entries decode under their keys; the intentions decode and
// validate; ca/roots decodes and, with the keys
// under ca/keys/, passes ca.CheckStoredState (each root's certificate,
// cross-signed certificate and private key parse and match, exactly one
// root active); a key under ca/keys/ for every root and for no other. A
// snapshot may carry no CA at all (neither ca/roots nor keys). Errors wrap
// ErrInvalid and name the key.
func CheckDurable(snap map[string][]byte) (SnapshotInfo, error) {
	var info SnapshotInfo
	keys, config := map[string][]byte{}, map[string][]byte{}
	for k, v := range snap {
		switch {
		case strings.HasPrefix(k, configDir):
			config[k] = v
		case k == intentionsKey, k == caRootsKey:
		case strings.HasPrefix(k, caKeysDir) && checkSegment("root ID", strings.TrimPrefix(k, caKeysDir)) == nil:
			keys[strings.TrimPrefix(k, caKeysDir)] = v
		default:
			return info, fmt.Errorf("%w: snapshot key %q is not durable mesh state", ErrInvalid, k)
		}
	}
	var err error
	if info.ConfigEntries, err = checkConfigDurable(config); err != nil {
		return info, err
	}
	if b, ok := snap[intentionsKey]; ok {
		st, err := intention.DecodeState(b)
		if err != nil {
			return info, fmt.Errorf("%w: snapshot key %s: %w", ErrInvalid, intentionsKey, err)
		}
		info.Intentions = len(st.Intentions)
	}
	b, ok := snap[caRootsKey]
	if !ok {
		if len(keys) > 0 {
			return info, fmt.Errorf("%w: the snapshot holds %d root keys but no %s", ErrInvalid, len(keys), caRootsKey)
		}
		return info, nil
	}
	sr, err := checkRoots(b, keys)
	if err != nil {
		return info, err
	}
	info.ClusterID, info.Roots = sr.ClusterID, len(sr.Roots)
	for _, r := range sr.Roots {
		if r.Active {
			info.ActiveRootID = r.ID
		}
	}
	return info, nil
}

// checkRoots validates a snapshot's ca/roots against its root keys.
func checkRoots(b []byte, keys map[string][]byte) (storedRoots, error) {
	sr, err := decodeStoredRoots(b)
	if err != nil {
		return sr, fmt.Errorf("%w: snapshot key %s: %w", ErrInvalid, caRootsKey, err)
	}
	pems := make(map[string]string, len(keys))
	for id, k := range keys {
		pems[id] = string(k)
	}
	for _, r := range sr.Roots {
		if err := checkSegment("root ID", r.ID); err != nil {
			return sr, fmt.Errorf("%w: snapshot key %s: %w", ErrInvalid, caRootsKey, err)
		}
		delete(keys, r.ID)
	}
	st, missing := sr.withKeys(pems)
	if missing != "" {
		return sr, fmt.Errorf("%w: the snapshot lacks %s%s, the private key of root %s", ErrInvalid, caKeysDir, missing, missing)
	}
	if len(keys) > 0 {
		id := slices.Sorted(maps.Keys(keys))[0]
		return sr, fmt.Errorf("%w: the snapshot holds %s%s, the key of no root in %s", ErrInvalid, caKeysDir, id, caRootsKey)
	}
	if err := ca.CheckStoredState(st); err != nil {
		return sr, fmt.Errorf("%w: snapshot keys %s and %s: %w", ErrInvalid, caRootsKey, caKeysDir, err)
	}
	return sr, nil
}

// PrepareRestore returns the durable keys a restore writes in place of
// live (the durable keys stored now), both relative to the store's prefix:
// snap's, checked by CheckDurable, with these changes:
//
//   - The indexes of the intentions and of ca/roots move past both live's
//     and snap's, so blocking queries and mirrors see a change; a value
//     equal to live's but for its index is live's, unchanged (a restore
//     that does not change the CA does not re-issue leaves).
//   - config/index gets a new value when the config entries differ from
//     live's (the config index moves), else keeps live's.
//   - A snapshot without a CA keeps live's (ca/roots and keys together);
//     one without intentions means none: an empty list.
//
// A CA of another cluster ID than live's is refused with ErrOtherCA
// unless allowOtherCA (running servers then keep the CA they loaded until
// restarted: a CA does not change its trust domain while it runs).
func PrepareRestore(snap, live map[string][]byte, allowOtherCA bool) (map[string][]byte, SnapshotInfo, error) {
	info, err := CheckDurable(snap)
	if err != nil {
		return nil, info, err
	}
	out := map[string][]byte{}
	_, inSnap := snap[intentionsKey]
	if _, inLive := live[intentionsKey]; inSnap || inLive {
		ix, err := restoredIntentions(snap[intentionsKey], live[intentionsKey])
		if err != nil {
			return nil, info, err
		}
		out[intentionsKey] = ix
	}
	restoredConfig(snap, live, out)
	_, withCA := snap[caRootsKey]
	from := snap
	if !withCA {
		from = live
	}
	for k, v := range from {
		if strings.HasPrefix(k, caDir) {
			out[k] = v
		}
	}
	if withCA {
		if out[caRootsKey], err = restoredRoots(snap, live, allowOtherCA); err != nil {
			return nil, info, err
		}
		if cur, err := decodeStoredRoots(live[caRootsKey]); err == nil && cur.ClusterID != info.ClusterID {
			info.PreviousClusterID = cur.ClusterID
		}
	}
	return out, info, nil
}

// restoredIntentions is the intentions value a restore writes (snap nil:
// none stored in the snapshot).
func restoredIntentions(snap, live []byte) ([]byte, error) {
	var st, cur intention.State
	var err error
	if snap != nil {
		if st, err = intention.DecodeState(snap); err != nil {
			return nil, fmt.Errorf("%w: snapshot key %s: %w", ErrInvalid, intentionsKey, err)
		}
	}
	if live != nil {
		// An undecodable live value is simply replaced.
		if cur, err = intention.DecodeState(live); err == nil && sameIntentions(st, cur) {
			return live, nil
		}
	}
	st.Index = max(st.Index, cur.Index) + 1
	return intention.EncodeState(st)
}

// sameIntentions: a and b hold the same intentions, whatever their index.
func sameIntentions(a, b intention.State) bool {
	a.Index, b.Index = 0, 0
	return intention.EqualStates(a, b)
}

// restoredRoots is the ca/roots value a restore writes.
func restoredRoots(snap, live map[string][]byte, allowOtherCA bool) ([]byte, error) {
	sr, err := decodeStoredRoots(snap[caRootsKey])
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot key %s: %w", ErrInvalid, caRootsKey, err)
	}
	lb := live[caRootsKey]
	cur, err := decodeStoredRoots(lb)
	if err != nil {
		return snap[caRootsKey], nil // nothing (readable) to keep or to move past
	}
	if cur.ClusterID != sr.ClusterID && !allowOtherCA {
		return nil, fmt.Errorf("%w: the snapshot's CA is of trust domain %s, the cluster's of %s (force the restore to replace it)",
			ErrOtherCA, ca.TrustDomainOf(sr.ClusterID), ca.TrustDomainOf(cur.ClusterID))
	}
	if sameRoots(sr, cur) && sameKeys(snap, live) {
		return lb, nil
	}
	sr.Index = max(sr.Index, cur.Index) + 1
	b, err := json.Marshal(sr)
	if err != nil {
		return nil, fmt.Errorf("failed to encode CA state: %w", err)
	}
	return b, nil
}

func sameRoots(a, b storedRoots) bool {
	a.Index, b.Index = 0, 0
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// sameKeys: a and b hold the same root keys.
func sameKeys(a, b map[string][]byte) bool {
	n := 0
	for k, v := range a {
		if strings.HasPrefix(k, caKeysDir) {
			if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
				return false
			}
			n++
		}
	}
	for k := range b {
		if strings.HasPrefix(k, caKeysDir) {
			n--
		}
	}
	return n == 0
}
