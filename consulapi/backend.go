package consulapi

import (
	"context"
	"time"

	"github.com/meshlet/meshlet/authz"
	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/intention"
)

// The API reads and writes its state through these small interfaces; the
// control plane passes *catalog.Catalog, *ca.Manager, *intention.Store and
// *authz.Service. Every method must be safe for concurrent use.

// Catalog is the service catalog the API reads.
type Catalog interface {
	// Get returns the instance with this ID.
	Get(id string) (catalog.ServiceInstance, bool)
	// Service lists the instances of a service; ConnectProxies lists the
	// connect proxies fronting it.
	Service(name string) []catalog.ServiceInstance
	ConnectProxies(service string) []catalog.ServiceInstance
	// Services maps each service name to its tags.
	Services() map[string][]string
	// Index rises with every change, and Subscribe calls fn after each.
	Index() uint64
	Subscribe(fn func(catalog.Change)) (cancel func())
}

// CA issues leaves and publishes the roots.
type CA interface {
	Leaf(ctx context.Context, service string) (*ca.Leaf, error)
	Roots() ca.Roots
	// Subscribe calls fn after every roots change or leaf renewal.
	Subscribe(fn func(ca.Event)) (cancel func())
	// LeafTTL is the lifetime leaves are signed with.
	LeafTTL() time.Duration
}

// Intentions is the intentions store. Writes take the request's context:
// on a client agent it carries the caller's ACL secret to the servers.
type Intentions interface {
	UpsertCtx(ctx context.Context, in intention.Intention, replace bool) (intention.Intention, error)
	DeleteCtx(ctx context.Context, src, dst string) error
	DeleteByIDCtx(ctx context.Context, id string, pre intention.Precondition) error
	UpdateByIDCtx(ctx context.Context, id string, in intention.Intention, pre intention.Precondition) (intention.Intention, error)
	Get(src, dst string) (intention.Intention, error)
	GetByID(id string) (intention.Intention, error)
	List() []intention.Intention
	Check(src, dst string) (allowed bool, matched *intention.Intention)
	CheckRequest(src, dst string, req intention.Request) (allowed bool, matched *intention.Intention, perm int)
	Match(by, name string) []intention.Intention
	// Index rises with every change, and Subscribe calls fn after each.
	Index() uint64
	Subscribe(fn func()) (cancel func())
}

// Authorizer decides whether a client certificate may reach a service.
type Authorizer interface {
	Authorize(sourceURI, destService string) (authz.Decision, error)
}

var (
	_ Catalog    = (*catalog.Catalog)(nil)
	_ CA         = (*ca.Manager)(nil)
	_ Intentions = (*intention.Store)(nil)
	_ Authorizer = (*authz.Service)(nil)
)
