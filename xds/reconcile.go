package xds

import (
	"context"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
)

const (
	listenerType = resource.ListenerType
	clusterType  = resource.ClusterType
	endpointType = resource.EndpointType
	secretType   = resource.SecretType
	routeType    = resource.RouteType
)

// changes is what happened since the last reconcile.
type changes struct {
	services map[string]struct{}
	proxies  map[string]struct{}
	leaves   map[string]struct{}
	closed   map[string]struct{}
	roots    bool
	entries  bool      // the config entries changed: rebuild every local proxy
	since    time.Time // first change of the batch
}

func newChanges() changes {
	return changes{services: map[string]struct{}{}, proxies: map[string]struct{}{}, leaves: map[string]struct{}{}, closed: map[string]struct{}{}}
}

// proxyState is what is published for one proxy.
type proxyState struct {
	service   string
	linked    []string // a terminating gateway's linked services (their leaves)
	listeners []string
	clusters  []string
	routes    []string
	upstreams []claKey
}

// reconciler is the state only the reconciler goroutine touches.
type reconciler struct {
	proxies    map[string]*proxyState
	claRefs    map[claKey]map[string]struct{} // CLA -> proxies using it
	clas       map[claKey]bool                // published CLAs
	claSpecs   map[claKey]endpointSpec        // how each CLA is computed (latest build)
	filterErrs map[claKey]string              // last subset filter error logged per CLA
	leafRefs   map[string]map[string]struct{} // service -> its proxies
	leaves     map[string]bool                // published leaf secrets
	proxyless  map[string]bool                // services with proxyless resources
	holds      holdState                      // CA leaf references (holds.go)
	draining   map[string]bool                // deregistered proxies kept while their stream lives (draining.go)
	rootsOK    bool
}

func newReconciler() reconciler {
	return reconciler{
		proxies: map[string]*proxyState{}, claRefs: map[claKey]map[string]struct{}{}, clas: map[claKey]bool{}, claSpecs: map[claKey]endpointSpec{},
		filterErrs: map[claKey]string{},
		leafRefs:   map[string]map[string]struct{}{}, leaves: map[string]bool{}, proxyless: map[string]bool{},
		holds: newHoldState(), draining: map[string]bool{},
	}
}

// enqueue records a change and wakes the reconciler; it never blocks long.
func (s *Server) enqueue(fn func(*changes)) {
	s.pendMu.Lock()
	if s.pend.services == nil {
		s.pend = newChanges()
	}
	if s.pend.since.IsZero() {
		s.pend.since = time.Now()
	}
	fn(&s.pend)
	s.pendMu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Server) onCatalog(ch catalog.Change) {
	s.enqueue(func(c *changes) {
		for _, n := range ch.Services {
			c.services[n] = struct{}{}
		}
		for _, id := range ch.ProxyIDs {
			c.proxies[id] = struct{}{}
		}
	})
}

// onConfigEntries queues a rebuild of every local proxy: any chain, and
// any service's protocol, may have changed. Unchanged resources are not
// re-sent (content-hashed versions).
func (s *Server) onConfigEntries(uint64) {
	s.enqueue(func(c *changes) { c.entries = true })
}

func (s *Server) onCA(ev ca.Event) {
	s.enqueue(func(c *changes) {
		switch ev.Kind {
		case ca.EventRootsChanged:
			c.roots = true
		case ca.EventLeafRenewed:
			c.leaves[ev.Service] = struct{}{}
		}
	})
}

// streamClosed queues a check: a node that is not a registered proxy loses
// whatever per-node state it has.
func (s *Server) streamClosed(node string) {
	s.enqueue(func(c *changes) { c.closed[node] = struct{}{} })
}

// run is the reconciler: wait for a change, let the burst settle, rebuild.
func (s *Server) run() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		}
		t := time.NewTimer(s.cfg.Coalesce)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		s.pendMu.Lock()
		ch := s.pend
		s.pend = newChanges()
		s.pendMu.Unlock()
		s.reconcile(ch)
	}
}

// plan is one batch of cache operations, published in dependency order.
type plan struct {
	secrets, endpoints, clusters, routes, listeners  []op
	routeDels, clusterDels, endpointDels, secretDels []op
	planned                                          map[string]bool // typeURL+"\x00"+name of shared sets
	committed                                        []string        // proxies whose resources the plan publishes
}

func (p *plan) set(typeURL string, o op) {
	switch typeURL {
	case secretType:
		p.secrets = append(p.secrets, o)
	case endpointType:
		p.endpoints = append(p.endpoints, o)
	case clusterType:
		p.clusters = append(p.clusters, o)
	case routeType:
		p.routes = append(p.routes, o)
	case listenerType:
		p.listeners = append(p.listeners, o)
	}
	if o.node == "" && o.msg != nil {
		p.planned[typeURL+"\x00"+o.name] = true
	}
}

// reconcile rebuilds what ch touched and publishes it.
func (s *Server) reconcile(ch changes) {
	ver := s.cache.bump()
	s.tracker.setChangeTime(ver, ch.since)
	set, _ := s.cfg.ConfigEntries.Current()
	s.b.set = set
	if ch.entries {
		for _, inst := range s.cfg.Catalog.Proxies() {
			if s.isLocal(inst) {
				ch.proxies[inst.ID] = struct{}{}
			}
		}
	}
	s.touchLinked(ch, set.LinkedGateways())
	s.touchMeshGateways(ch)
	s.touchWildcardIngress(ch, set)
	p := &plan{planned: map[string]bool{}}
	s.planRoots(ch, p)
	staged := s.stageProxies(ch, p)
	s.planLeaves(ch, staged, p)
	s.planEndpoints(ch, staged, p)
	exists := func(typeURL, name string) bool {
		return p.planned[typeURL+"\x00"+name] || s.cache.has(typeURL, "", name)
	}
	for id, res := range staged {
		if err := checkConsistent(msgs(res.listeners), msgs(res.clusters), msgs(res.routes), exists); err != nil {
			s.held(id, res, err)
			continue
		}
		s.setConfigError(id, nil)
		s.commitProxy(id, res, p)
	}
	s.planProxyless(ch, p)
	s.planGC(p)
	s.apply(p)
	s.releaseUnused()
}

// held keeps a proxy at its last good resources after a failed check. A
// missing leaf is transient (retried); anything else is the proxy's fault.
func (s *Server) held(id string, res *proxyResources, err error) {
	if missing := s.missingLeaf(res); missing != "" || !s.rec.rootsOK {
		s.log.Debug("proxy waits for its leaf certificate", "proxy_id", id, "service", missing)
		time.AfterFunc(leafRetryDelay, func() {
			s.enqueue(func(c *changes) { c.proxies[id] = struct{}{} })
		})
		return
	}
	s.setConfigError(id, err)
}

func (s *Server) planRoots(ch changes, p *plan) {
	if !ch.roots && s.rec.rootsOK {
		return
	}
	sec, err := rootsSecret(s.cfg.Certs.Roots())
	if err != nil {
		s.log.Error("no CA roots to serve", "error", err)
		return
	}
	s.rec.rootsOK = true
	p.set(secretType, op{name: RootsSecret, msg: sec})
	for svc := range s.rec.leafRefs {
		ch.leaves[svc] = struct{}{} // leaves chain to the new roots
	}
}

// stageProxies builds every changed proxy, and removes the proxies that
// left the catalog (or whose stream closed without a registration).
func (s *Server) stageProxies(ch changes, p *plan) map[string]*proxyResources {
	staged := map[string]*proxyResources{}
	ids := make(map[string]bool, len(ch.proxies)+len(ch.closed))
	for id := range ch.proxies {
		ids[id] = true
	}
	for id := range ch.closed {
		if _, known := s.rec.proxies[id]; !known || s.rec.draining[id] {
			ids[id] = true
		}
	}
	for id := range ids {
		inst, ok := s.localProxy(id)
		if !ok {
			if !s.keepDraining(id) { // a sidecar in its shutdown_delay keeps its config
				s.removeProxy(id, p)
				s.unholdProxy(id)
				s.forget(id)
			}
			continue
		}
		delete(s.rec.draining, id)
		if inst.Proxy != nil && inst.Proxy.DestinationServiceName != "" {
			s.holdProxy(id, inst.Proxy.DestinationServiceName)
		} else {
			s.unholdProxy(id) // no destination: a config error below
		}
		res, err := s.b.proxy(inst)
		if err != nil {
			s.setConfigError(id, err)
			continue
		}
		s.holdLinked(id, res.linked)
		staged[id] = res
	}
	return staged
}

// planLeaves fetches the leaves that were renewed or are needed for the
// first time. Fetching may block on signing: it runs without locks.
func (s *Server) planLeaves(ch changes, staged map[string]*proxyResources, p *plan) {
	need := map[string]bool{}
	for _, res := range staged {
		if res.setsLeafDNS {
			s.setLeafDNS(res)
		}
	}
	for svc := range ch.leaves {
		if len(s.rec.leafRefs[svc]) > 0 {
			need[svc] = true
		}
	}
	for _, res := range staged {
		for _, svc := range res.leafServices() {
			_, renewed := ch.leaves[svc]
			if renewed || !s.rec.leaves[svc] || !s.rec.rootsOK {
				need[svc] = true
			}
		}
	}
	for svc := range need {
		ctx, cancel := context.WithTimeout(s.ctx, leafFetchTimeout)
		leaf, err := s.cfg.Certs.Leaf(ctx, svc)
		cancel()
		if err == nil {
			var sec proto.Message
			if sec, err = leafSecret(svc, leaf); err == nil {
				p.set(secretType, op{name: LeafSecretName(svc), msg: sec})
				s.rec.leaves[svc] = true
				continue
			}
		}
		s.log.Warn("failed to get leaf certificate; will retry", "service", svc, "error", err)
	}
}

// leafServices are the services whose leaves a proxy presents: its own,
// and a terminating gateway's linked services.
func (r *proxyResources) leafServices() []string {
	return append([]string{r.service}, r.linked...)
}

// missingLeaf is a leaf a proxy needs that is not published yet ("" when
// none is missing).
func (s *Server) missingLeaf(res *proxyResources) string {
	for _, svc := range res.leafServices() {
		if !s.rec.leaves[svc] {
			return svc
		}
	}
	return ""
}
