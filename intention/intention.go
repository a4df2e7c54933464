// Package intention is the intentions store: which service may connect to
// which, with Consul's precedence (exact→exact 9 > *→exact 8 > exact→* 6 >
// *→* 5; first match wins; no match → the default policy). Partial
// wildcards ("web*") are invalid. The store is persisted atomically (temp
// file + rename) as JSON in its directory, or kept in memory.
//
// Each intentions.json carries a SHA-256 of its content, and a marker file
// (intentions.initialized) says the directory holds intentions: a state
// file that is missing next to the marker, or corrupt, stops New with
// ErrStateMissing or ErrStateCorrupt instead of starting with no intentions.
//
// Concurrency: a Store is safe for concurrent use. Readers (Check, Match,
// Get, List) load an immutable snapshot through an atomic pointer and never
// lock, so authorization never waits for a write. Writers are serialized by
// a write mutex held while the new state is encoded and fsynced; the new
// snapshot is published only once it is on disk, so a failed write changes
// nothing. Subscribers are called synchronously after every change, without
// locks held, and must not block.
//
// Cluster mode: the intentions' state (State) is one value in the
// cluster's store; State's pure operations (Upsert, Delete, DeleteByID)
// hold the write rules that Store uses too, and EncodeState/DecodeState
// are its wire form. An agent reads from a mirror (NewMirror) that follows
// the cluster through Replace and sends its writes to a Writer. LoadDir
// reads a store's dir, without creating anything, for a one-time import.
package intention

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meshlet/meshlet/internal/lazyre"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrExists: an intention for the (source, destination) pair exists.
	ErrExists = errors.New("intention already exists")
	// ErrNotFound: no such intention.
	ErrNotFound = errors.New("intention not found")
	// ErrInvalid: the intention was rejected; nothing was changed.
	ErrInvalid = errors.New("invalid intention")
)

// Actions, namespaces and source types.
const (
	ActionAllow      = "allow"
	ActionDeny       = "deny"
	Wildcard         = "*"
	DefaultNamespace = "default"
	SourceTypeConsul = "consul"
)

// Intention allows or denies connections from a source service to a
// destination service. Its JSON shape is Consul's.
type Intention struct {
	ID              string
	Description     string `json:",omitempty"`
	SourceNS        string
	SourceName      string
	DestinationNS   string
	DestinationName string
	SourceType      string
	Action          string `json:",omitempty"`
	// Permissions, instead of Action, decide request by request (L7
	// intentions, for destinations whose protocol is HTTP): the first
	// matching permission's action applies; none: the default policy.
	Permissions []*Permission `json:",omitempty"`
	Precedence  int
	CreatedAt   time.Time
	UpdatedAt   time.Time
	CreateIndex uint64
	ModifyIndex uint64
}

// String renders "src => dst (action)".
func (ix Intention) String() string {
	action := ix.Action
	if len(ix.Permissions) > 0 {
		action = fmt.Sprintf("%d permissions", len(ix.Permissions))
	}
	return fmt.Sprintf("%s => %s (%s)", ix.SourceName, ix.DestinationName, action)
}

// IsL7 reports whether the intention decides by request (Permissions).
func (ix Intention) IsL7() bool { return len(ix.Permissions) > 0 }

// nameRE accepts Consul-style service names.
var nameRE = lazyre.New(`^[a-zA-Z0-9]([a-zA-Z0-9._-]{0,251}[a-zA-Z0-9])?$`)

// validName reports whether name is "*" or a service name (no partial
// wildcard).
func validName(name string) bool {
	return name == Wildcard || nameRE.MatchString(name)
}

// normalize fills defaults and validates in; the returned intention has its
// precedence computed.
func normalize(in Intention) (Intention, error) {
	if in.SourceNS == "" {
		in.SourceNS = DefaultNamespace
	}
	if in.DestinationNS == "" {
		in.DestinationNS = DefaultNamespace
	}
	if in.SourceType == "" {
		in.SourceType = SourceTypeConsul
	}
	in.Action = strings.ToLower(in.Action)
	if err := normalizePermissions(&in); err != nil {
		return in, err
	}
	switch {
	case in.SourceName == "" || in.DestinationName == "":
		return in, fmt.Errorf("%w: source and destination names are required", ErrInvalid)
	case !validName(in.SourceName):
		return in, fmt.Errorf("%w: source name %q must be \"*\" or a service name (no partial wildcards)", ErrInvalid, in.SourceName)
	case !validName(in.DestinationName):
		return in, fmt.Errorf("%w: destination name %q must be \"*\" or a service name (no partial wildcards)", ErrInvalid, in.DestinationName)
	case in.SourceNS != DefaultNamespace || in.DestinationNS != DefaultNamespace:
		return in, fmt.Errorf("%w: only the %q namespace is supported", ErrInvalid, DefaultNamespace)
	case in.SourceType != SourceTypeConsul:
		return in, fmt.Errorf("%w: source type %q is not supported (want %q)", ErrInvalid, in.SourceType, SourceTypeConsul)
	case len(in.Permissions) == 0 && in.Action != ActionAllow && in.Action != ActionDeny:
		return in, fmt.Errorf("%w: action %q must be %q or %q", ErrInvalid, in.Action, ActionAllow, ActionDeny)
	case len(in.Description) > 512:
		return in, fmt.Errorf("%w: description longer than 512 bytes", ErrInvalid)
	}
	in.Precedence = precedence(in)
	return in, nil
}

// precedence computes Consul's value: the number of exact parts of the
// destination sets a maximum (9, 6, 3 for 2, 1, 0 exact parts, namespace
// included), and each missing exact source part subtracts one.
func precedence(ix Intention) int {
	var top int
	switch countExact(ix.DestinationNS, ix.DestinationName) {
	case 2:
		top = 9
	case 1:
		top = 6
	default:
		top = 3
	}
	return top - (2 - countExact(ix.SourceNS, ix.SourceName))
}

func countExact(ns, name string) int {
	switch {
	case ns == Wildcard:
		return 0
	case name == Wildcard:
		return 1
	default:
		return 2
	}
}

// less orders intentions for evaluation: higher precedence first, then by
// (source NS, source, destination NS, destination) as Consul does.
func less(a, b *Intention) bool {
	if a.Precedence != b.Precedence {
		return a.Precedence > b.Precedence
	}
	if a.SourceNS != b.SourceNS {
		return a.SourceNS < b.SourceNS
	}
	if a.SourceName != b.SourceName {
		return a.SourceName < b.SourceName
	}
	if a.DestinationNS != b.DestinationNS {
		return a.DestinationNS < b.DestinationNS
	}
	return a.DestinationName < b.DestinationName
}

func matches(pattern, name string) bool { return pattern == Wildcard || pattern == name }
