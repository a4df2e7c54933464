package sidecar

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Resource type URLs of the xDS types the proxy consumes.
const (
	typeListener = "type.googleapis.com/envoy.config.listener.v3.Listener"
	typeCluster  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	typeEndpoint = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	typeRoute    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	typeSecret   = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
)

// resourceKind describes one xDS type: how to decode it and whether it is
// subscribed by wildcard.
type resourceKind struct {
	typeURL  string
	short    string // lds, cds, eds, rds, sds (stats and logs)
	wildcard bool
	newMsg   func() proto.Message
	name     func(proto.Message) string
	decode   func(proto.Message) (any, error)
}

// kinds lists the types in the order the proxy subscribes to them.
var kinds = []*resourceKind{
	{typeCluster, "cds", true, func() proto.Message { return &clusterv3.Cluster{} },
		func(m proto.Message) string { return m.(*clusterv3.Cluster).GetName() },
		func(m proto.Message) (any, error) { return decodeCluster(m.(*clusterv3.Cluster)) }},
	{typeListener, "lds", true, func() proto.Message { return &listenerv3.Listener{} },
		func(m proto.Message) string { return m.(*listenerv3.Listener).GetName() },
		func(m proto.Message) (any, error) { return decodeListener(m.(*listenerv3.Listener)) }},
	{typeEndpoint, "eds", false, func() proto.Message { return &endpointv3.ClusterLoadAssignment{} },
		func(m proto.Message) string { return m.(*endpointv3.ClusterLoadAssignment).GetClusterName() },
		func(m proto.Message) (any, error) { return decodeEndpoints(m.(*endpointv3.ClusterLoadAssignment)) }},
	{typeRoute, "rds", false, func() proto.Message { return &routev3.RouteConfiguration{} },
		func(m proto.Message) string { return m.(*routev3.RouteConfiguration).GetName() },
		func(m proto.Message) (any, error) { return decodeRouteConfig(m.(*routev3.RouteConfiguration)) }},
	{typeSecret, "sds", false, func() proto.Message { return &tlsv3.Secret{} },
		func(m proto.Message) string { return m.(*tlsv3.Secret).GetName() },
		func(m proto.Message) (any, error) { return decodeSecret(m.(*tlsv3.Secret)) }},
	// RTDS: only AuthzEpochResource (authzcache.go).
	{typeRuntime, "rtds", false, func() proto.Message { return &runtimev3.Runtime{} },
		func(m proto.Message) string { return m.(*runtimev3.Runtime).GetName() },
		decodeAuthzEpoch},
}

func kindOf(typeURL string) *resourceKind {
	for _, k := range kinds {
		if k.typeURL == typeURL {
			return k
		}
	}
	return nil
}

// entry is one accepted resource. Entries are immutable once stored; an
// unchanged resource keeps its entry (and decoded value) across updates.
type entry struct {
	name    string
	version string
	raw     proto.Message
	cfg     any // *listenerConfig, *clusterConfig, *endpointSet, *routeConfig, *secret
	updated time.Time
}

// update is one discovery response, normalized across delta and SotW.
type update struct {
	typeURL   string
	version   string // SotW version_info, or delta system_version_info
	nonce     string
	resources []rawResource
	removed   []string
	full      bool // SotW wildcard type: the set replaces the current one
}

type rawResource struct {
	name    string
	version string
	res     *anypb.Any
}

// store holds the accepted resources per type. The ADS loop is its only
// writer; mu lets the admin server read it.
type store struct {
	mu       sync.RWMutex
	res      map[string]map[string]*entry // type URL -> name -> entry
	versions map[string]string            // type URL -> last accepted version
	seen     map[string]bool              // type URL -> a response was accepted
}

func newStore() *store {
	s := &store{res: map[string]map[string]*entry{}, versions: map[string]string{}, seen: map[string]bool{}}
	for _, k := range kinds {
		s.res[k.typeURL] = map[string]*entry{}
	}
	return s
}

// get returns the current entries of a type. The map must not be modified;
// it is replaced, never mutated, on commit.
func (s *store) get(typeURL string) map[string]*entry {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.res[typeURL]
}

// prepare decodes and validates every resource of u and returns the type's
// next entry set, or an error naming every invalid resource. It changes
// nothing. subscribed restricts a non-wildcard SotW set to current names.
func (s *store) prepare(u *update, subscribed map[string]bool) (map[string]*entry, error) {
	k := kindOf(u.typeURL)
	if k == nil {
		return nil, fmt.Errorf("resource type %s is not supported", u.typeURL)
	}
	cur := s.get(u.typeURL)
	next := make(map[string]*entry, len(cur)+len(u.resources))
	if !u.full {
		for name, e := range cur {
			next[name] = e
		}
	}
	for _, name := range u.removed {
		delete(next, name)
	}
	var errs []string
	seen := map[string]bool{}
	now := time.Now()
	for _, r := range u.resources {
		e, err := decodeEntry(k, r, cur, now)
		if err == nil && seen[e.name] {
			err = fmt.Errorf("%s %q appears twice in one response", k.short, e.name)
		}
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		seen[e.name] = true
		if e.version == "" {
			e.version = u.version
		}
		next[e.name] = e
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, errors.New(strings.Join(errs, "; "))
	}
	if !k.wildcard && subscribed != nil {
		for name := range next {
			if !subscribed[name] {
				delete(next, name)
			}
		}
	}
	return next, nil
}

// decodeEntry decodes one resource, reusing the current entry's decoded value
// when the resource is unchanged.
func decodeEntry(k *resourceKind, r rawResource, cur map[string]*entry, now time.Time) (*entry, error) {
	if r.res == nil {
		return nil, fmt.Errorf("%s %q: resource body is missing", k.short, r.name)
	}
	if r.res.GetTypeUrl() != k.typeURL {
		return nil, fmt.Errorf("%s %q: resource has type %s", k.short, r.name, r.res.GetTypeUrl())
	}
	msg := k.newMsg()
	if err := r.res.UnmarshalTo(msg); err != nil {
		return nil, fmt.Errorf("%s %q: failed to unmarshal: %w", k.short, r.name, err)
	}
	name := k.name(msg)
	if r.name != "" && name != r.name {
		return nil, fmt.Errorf("%s %q: resource is named %q", k.short, r.name, name)
	}
	if name == "" {
		return nil, fmt.Errorf("%s: resource has no name", k.short)
	}
	if old, ok := cur[name]; ok && proto.Equal(old.raw, msg) {
		return &entry{name: name, version: r.version, raw: old.raw, cfg: old.cfg, updated: old.updated}, nil
	}
	cfg, err := k.decode(msg)
	if err != nil {
		return nil, err
	}
	return &entry{name: name, version: r.version, raw: msg, cfg: cfg, updated: now}, nil
}

// commit replaces a type's entries with next, as accepted at version.
func (s *store) commit(typeURL, version string, next map[string]*entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res[typeURL] = next
	s.versions[typeURL] = version
	s.seen[typeURL] = true
}

// prune drops entries of a non-wildcard type that are no longer wanted.
func (s *store) prune(typeURL string, wanted map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.res[typeURL]
	var next map[string]*entry
	for name := range cur {
		if !wanted[name] {
			if next == nil {
				next = make(map[string]*entry, len(cur))
				for n, e := range cur {
					next[n] = e
				}
			}
			delete(next, name)
		}
	}
	if next != nil {
		s.res[typeURL] = next
	}
}

// versionsOf returns name -> version of a type (delta initial_resource_versions).
func (s *store) versionsOf(typeURL string) map[string]string {
	cur := s.get(typeURL)
	out := make(map[string]string, len(cur))
	for name, e := range cur {
		out[name] = e.version
	}
	return out
}

func (s *store) accepted(typeURL string) (version string, seen bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.versions[typeURL], s.seen[typeURL]
}
