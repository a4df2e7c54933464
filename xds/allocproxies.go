package xds

import (
	"errors"
	"fmt"
	"sync"

	"github.com/meshlet/meshlet/catalog"
)

// The proxies an allocation's job runs. The catalog holds an allocation's
// proxies only while they are registered: not yet after an agent restart
// (the socket is served before the services hook registers them again),
// no more in the group's shutdown_delay (they are deregistered before the
// tasks are killed). Their sidecars still run then, and may reconnect
// their xDS stream and check connections. The socket, which only the
// allocation's namespace can reach, knows them from the job
// (WithAllocProxies): a stream through it may act as one of them and a
// check through it may concern their services, registered or not, and
// nothing else.

// ErrInvalidAllocProxy: WithAllocProxies was given an instance that is not
// a proxy of the socket's allocation.
var ErrInvalidAllocProxy = errors.New("not a proxy of the allocation")

// WithAllocProxies declares the proxies the socket's allocation runs, as
// its job registers them (ID, Name, Kind, AllocID and
// Proxy.DestinationServiceName are read; see connect.ProxyIdentities).
func WithAllocProxies(proxies []catalog.ServiceInstance) AllocOption {
	return func(l *allocListener) error {
		for _, p := range proxies {
			if p.ID == "" || !catalog.IsProxyKind(p.Kind) || p.Proxy == nil || p.AllocID != l.allocID {
				return fmt.Errorf("failed to declare proxy %q of allocation %s: %w", p.ID, l.allocID, ErrInvalidAllocProxy)
			}
		}
		l.proxies = append([]catalog.ServiceInstance(nil), proxies...)
		return nil
	}
}

// declaredProxy returns proxy id when the socket declares it.
func (l *allocListener) declaredProxy(id string) (catalog.ServiceInstance, bool) {
	if l == nil {
		return catalog.ServiceInstance{}, false
	}
	for _, p := range l.proxies {
		if p.ID == id {
			return p, true
		}
	}
	return catalog.ServiceInstance{}, false
}

// declaredNodes is the proxies the open allocation sockets declare, by
// node ID: those whose streams wait for their resources like registered
// ones (warmup.go) rather than be answered with none. Lock rule: mu is
// never held while calling the cache (the cache calls in holding its own).
type declaredNodes struct {
	mu    sync.Mutex
	nodes map[string]*allocListener
}

func (d *declaredNodes) add(l *allocListener) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.nodes == nil {
		d.nodes = map[string]*allocListener{}
	}
	for _, p := range l.proxies {
		d.nodes[p.ID] = l
	}
}

// remove forgets l's proxies (l closed); a socket served again for the
// same allocation keeps its own.
func (d *declaredNodes) remove(l *allocListener) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range l.proxies {
		if d.nodes[p.ID] == l {
			delete(d.nodes, p.ID)
		}
	}
}

func (d *declaredNodes) has(node string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.nodes[node] != nil
}

// allocProxy returns proxy node as a stream through who's socket may act
// as it: registered on this node, else declared by the socket.
func (s *Server) allocProxy(who peerInfo, node string) (catalog.ServiceInstance, bool) {
	if inst, ok := s.localProxy(node); ok {
		return inst, true
	}
	if _, registered := s.cfg.Catalog.Get(node); registered {
		return catalog.ServiceInstance{}, false // another node's, or not a proxy
	}
	return who.sock.declaredProxy(node)
}
