package sidecar

import (
	"fmt"
	"sync"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"google.golang.org/protobuf/proto"
)

// Authorization result cache.
//
// The HTTP ext_authz filter asks the authorization service about every
// request: a gRPC round trip to the agent that costs the server-side
// sidecar more CPU than proxying the request. Most answers do not depend
// on the request: with no L7 intention deciding, the verdict is the
// (source, destination) pair's. meshlet's authorization service marks such
// allow answers with the intentions' epoch (dynamic metadata
// AuthzEpochKey), and its xDS server publishes the current epoch as the
// RTDS resource AuthzEpochResource, a new one after every intention (or
// CA) change. The proxy keeps a marked allow per identity pair while the
// epoch it was given in is the current one, and answers the pair's next
// requests from it; a new epoch empties the cache.
//
// What stays uncached: the network ext_authz check of every new connection
// (so a deny takes effect on the next connection as soon as the agent has
// it, whether or not the push has arrived), denials, answers that change
// headers, answers without an epoch (other authorization services, L7
// intentions) and anything before the first epoch arrives. Requests on an
// open connection may go on under a cached allow until the new epoch
// arrives (milliseconds; the new epoch also has the re-authorization loop
// re-check every open pair at once, see reauthz.go).
const (
	// AuthzEpochResource is the RTDS resource carrying the epoch.
	AuthzEpochResource = "meshlet.authz_epoch"
	// AuthzEpochKey names the epoch in that resource's layer and in a
	// Check response's dynamic metadata.
	AuthzEpochKey = "meshlet_authz_epoch"
	// maxCachedPairs bounds the cache.
	maxCachedPairs = 4096
)

const typeRuntime = "type.googleapis.com/envoy.service.runtime.v3.Runtime"

// authzEpoch is a decoded AuthzEpochResource.
type authzEpoch struct{ epoch string }

func decodeAuthzEpoch(m proto.Message) (any, error) {
	rt := m.(*runtimev3.Runtime)
	v, ok := rt.GetLayer().GetFields()[AuthzEpochKey]
	if rt.GetName() == AuthzEpochResource && (!ok || v.GetStringValue() == "") {
		return nil, fmt.Errorf("runtime %q has no %s", rt.GetName(), AuthzEpochKey)
	}
	return &authzEpoch{epoch: v.GetStringValue()}, nil
}

// responseEpoch is the epoch an allow answer was marked with, "" if none.
func responseEpoch(resp *authv3.CheckResponse) string {
	return resp.GetDynamicMetadata().GetFields()[AuthzEpochKey].GetStringValue()
}

// authzCache holds cacheable allows per (source, destination) URI pair for
// the current epoch. Safe for concurrent use.
type authzCache struct {
	mu      sync.Mutex
	epoch   string // "" until the control plane sends one
	allowed map[[2]string]struct{}
}

// setEpoch makes e the current epoch; a change drops every entry and is
// reported.
func (c *authzCache) setEpoch(e string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e == c.epoch {
		return false
	}
	c.epoch = e
	clear(c.allowed)
	return true
}

// current is the current epoch ("" none).
func (c *authzCache) current() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

// put remembers an allow for key given in epoch e, if e is current.
func (c *authzCache) put(key [2]string, e string) {
	if e == "" || key[0] == "" || key[1] == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e != c.epoch {
		return
	}
	if c.allowed == nil || len(c.allowed) >= maxCachedPairs {
		c.allowed = map[[2]string]struct{}{}
	}
	c.allowed[key] = struct{}{}
}

// allows reports whether key has an allow for the current epoch.
func (c *authzCache) allows(key [2]string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.allowed[key]
	return ok && c.epoch != ""
}

// allowedIn returns the current epoch if key has an allow for it, else "".
func (c *authzCache) allowedIn(key [2]string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.allowed[key]; ok {
		return c.epoch
	}
	return ""
}

// drop forgets key (a later check denied it).
func (c *authzCache) drop(key [2]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.allowed, key)
}

// authzWanted reports whether any listener runs an ext_authz filter
// (network or HTTP): only then does the proxy subscribe to the epoch.
func authzWanted(ls []*listenerConfig) bool {
	for _, l := range ls {
		for _, ch := range l.chains() {
			if ch.authz != nil || (ch.http != nil && ch.http.authz != nil) {
				return true
			}
		}
	}
	return false
}
