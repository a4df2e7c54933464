package configentry

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	consul "github.com/hashicorp/consul/api"
)

// Kinds served by meshlet.
const (
	ProxyDefaults   = consul.ProxyDefaults   // "proxy-defaults"; its only name is "global"
	ServiceDefaults = consul.ServiceDefaults // "service-defaults"
	ServiceRouter   = consul.ServiceRouter   // "service-router"
	ServiceSplitter = consul.ServiceSplitter // "service-splitter"
	ServiceResolver = consul.ServiceResolver // "service-resolver"

	// GlobalName is the only name of a proxy-defaults entry.
	GlobalName = consul.ProxyConfigGlobal
)

// Kinds lists the kinds meshlet accepts, sorted.
var Kinds = []string{IngressGateway, ProxyDefaults, ServiceDefaults, ServiceResolver, ServiceRouter, ServiceSplitter, TerminatingGateway}

// Sentinel errors; every error from this package wraps one of them.
var (
	// ErrInvalid: an entry is malformed on its own (unknown key, bad
	// value, weights not summing to 100...).
	ErrInvalid = errors.New("invalid config entry")
	// ErrConflict: an entry is fine alone but not with the others (a
	// router for a tcp service, a subset no resolver defines...).
	ErrConflict = errors.New("config entry conflicts with other entries")
	// ErrUnknownKind: a kind meshlet does not serve.
	ErrUnknownKind = errors.New("unknown config entry kind")
)

// Entry is one config entry (the consul/api interface).
type Entry = consul.ConfigEntry

// Key names an entry.
type Key struct{ Kind, Name string }

func (k Key) String() string { return k.Kind + "/" + k.Name }

// KeyOf returns an entry's key.
func KeyOf(e Entry) Key { return Key{Kind: e.GetKind(), Name: e.GetName()} }

// KnownKind reports whether kind is served.
func KnownKind(kind string) bool {
	i := sort.SearchStrings(Kinds, kind)
	return i < len(Kinds) && Kinds[i] == kind
}

// Set is a snapshot of every entry, by key. It is not safe for concurrent
// writes; readers share it freely once built.
type Set struct {
	entries map[Key]Entry

	// problemsOnce caches the set's referential problems (see check.go):
	// a set does not change once built.
	problemsOnce sync.Once
	problemsList []string
}

// NewSet builds a set from entries (a later duplicate key wins).
func NewSet(entries ...Entry) *Set {
	s := &Set{entries: make(map[Key]Entry, len(entries))}
	for _, e := range entries {
		s.entries[KeyOf(e)] = e
	}
	return s
}

// Get returns the entry of that kind and name, nil when none.
func (s *Set) Get(kind, name string) Entry {
	if s == nil {
		return nil
	}
	return s.entries[Key{kind, name}]
}

// List returns the entries of one kind ("" for all), sorted by kind then name.
func (s *Set) List(kind string) []Entry {
	if s == nil {
		return nil
	}
	var out []Entry
	for k, e := range s.entries {
		if kind == "" || k.Kind == kind {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := KeyOf(out[i]), KeyOf(out[j])
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Name < b.Name
	})
	return out
}

// With returns a copy of s where e replaces the entry of its key.
func (s *Set) With(e Entry) *Set {
	out := s.clone()
	out.entries[KeyOf(e)] = e
	return out
}

// Without returns a copy of s without the entry of key k.
func (s *Set) Without(k Key) *Set {
	out := s.clone()
	delete(out.entries, k)
	return out
}

func (s *Set) clone() *Set {
	out := &Set{entries: map[Key]Entry{}}
	if s != nil {
		for k, e := range s.entries {
			out.entries[k] = e
		}
	}
	return out
}

// Len is the number of entries.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.entries)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
