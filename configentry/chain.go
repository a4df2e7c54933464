package configentry

import (
	"time"

	consul "github.com/hashicorp/consul/api"
)

// Protocols of a service, as service-defaults and proxy-defaults name them.
const (
	ProtocolTCP   = "tcp"
	ProtocolHTTP  = "http"
	ProtocolHTTP2 = "http2"
	ProtocolGRPC  = "grpc"
)

// IsHTTP reports whether a protocol is served by an HTTP connection
// manager (and so may be routed and split).
func IsHTTP(protocol string) bool {
	return protocol == ProtocolHTTP || protocol == ProtocolHTTP2 || protocol == ProtocolGRPC
}

// Chain is the compiled discovery chain of one upstream service: what a
// proxy calling Service does with a request. For a tcp chain Routes holds
// exactly one catch-all route with one split.
type Chain struct {
	// Service is the upstream's name; Datacenter the caller's default.
	Service    string
	Datacenter string
	// Protocol is the service's protocol (tcp when nothing says).
	Protocol string
	// Routes are tried in order; the last one always matches (prefix "/").
	Routes []*Route
	// Targets are every (service, subset, datacenter) a route may send
	// to, by Target.ID, including failover targets.
	Targets map[string]*Target
	// Default is true when no config entry touched this chain (it routes
	// everything to the whole service, as before config entries).
	Default bool
}

// Route is one route of a chain.
type Route struct {
	// Match is nil for the catch-all route.
	Match *consul.ServiceRouteHTTPMatch
	// Splits share the traffic; weights sum to 100 (one split: 100).
	Splits []Split
	// Destination behaviour, from the router's Destination.
	PrefixRewrite         string
	RequestTimeout        time.Duration // 0: the resolver's, else Envoy's default
	IdleTimeout           time.Duration
	NumRetries            uint32
	RetryOnConnectFailure bool
	RetryOnStatusCodes    []uint32
	RetryOn               []string
	RequestHeaders        *consul.HTTPHeaderModifiers
	ResponseHeaders       *consul.HTTPHeaderModifiers
}

// Split sends Weight percent of a route's traffic to one target.
type Split struct {
	Weight          float32
	TargetID        string
	RequestHeaders  *consul.HTTPHeaderModifiers
	ResponseHeaders *consul.HTTPHeaderModifiers
}

// Target is one (service, subset, datacenter) endpoint set.
type Target struct {
	// ID is Consul's target ID: "<subset>.<service>.default.default.<dc>"
	// ("" subset: "<service>.default.default.<dc>").
	ID         string
	Service    string
	Subset     string
	Datacenter string
	// Filter selects the subset's instances (go-bexpr over Service.ID,
	// Service.Tags, Service.Meta.*, Node.Node, Node.Meta.*...); "" all.
	Filter string
	// OnlyPassing drops warning instances too (critical ones always go).
	OnlyPassing bool
	// ConnectTimeout is the resolver's (5 s when unset).
	ConnectTimeout time.Duration
	// LoadBalancer is the resolver's policy; nil: round robin.
	LoadBalancer *consul.LoadBalancer
	// Failover lists target IDs tried, in order, when this target has no
	// healthy instance.
	Failover []string
}

// DefaultConnectTimeout is a resolver's connect timeout when unset.
const DefaultConnectTimeout = 5 * time.Second
