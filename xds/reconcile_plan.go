package xds

import (
	"google.golang.org/protobuf/proto"

	"github.com/meshlet/meshlet/catalog"
)

// groupThreshold: above this many services, endpoints are read from one
// scan of the catalog instead of one query per service.
const groupThreshold = 8

func msgs[T proto.Message](in []T) []proto.Message {
	out := make([]proto.Message, len(in))
	for i, m := range in {
		out[i] = m
	}
	return out
}

// planEndpoints rebuilds the shared load assignments of the upstreams
// staged proxies need, and of those reading a service the change touched.
func (s *Server) planEndpoints(ch changes, staged map[string]*proxyResources, p *plan) {
	keys := map[claKey]bool{}
	for _, res := range staged {
		for _, k := range res.upstreams {
			keys[k] = true
			s.rec.claSpecs[k] = res.specs[k]
		}
	}
	for k := range s.rec.claRefs {
		for svc := range ch.services {
			if s.rec.claSpecs[k].uses(svc) {
				keys[k] = true
				break
			}
		}
	}
	if len(keys) == 0 {
		return
	}
	src := s.instanceSource(len(keys) > groupThreshold)
	for k := range keys {
		name := k.clusterName(s.b.trustDomain)
		cla, err := targetAssignment(name, s.rec.claSpecs[k], src, s.cfg.matchFilter)
		s.filterError(k, name, err)
		p.set(endpointType, op{name: name, msg: cla})
		s.rec.clas[k] = true
	}
}

// filterError logs a subset filter's failure once, until it changes.
func (s *Server) filterError(k claKey, name string, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if s.rec.filterErrs[k] == msg {
		return
	}
	if msg == "" {
		delete(s.rec.filterErrs, k)
		return
	}
	s.rec.filterErrs[k] = msg
	s.log.Warn("subset filter failed; instances it could not judge are left out", "cluster", name, "error", err)
}

// instanceSource reads sidecars from the catalog: from one scan of every
// proxy when many services are needed, else one query per service.
func (s *Server) instanceSource(scan bool) instanceSource {
	var bySvc map[string][]catalog.ServiceInstance
	if scan {
		bySvc = map[string][]catalog.ServiceInstance{}
		for _, inst := range s.cfg.Catalog.Proxies() {
			if inst.Proxy != nil && inst.Kind == catalog.KindConnectProxy { // gateways are no endpoints
				bySvc[inst.Proxy.DestinationServiceName] = append(bySvc[inst.Proxy.DestinationServiceName], inst)
			}
		}
	}
	linked := s.b.entries().LinkedGateways()
	return instanceSource{
		sidecars: func(service, dc string) []catalog.ServiceInstance {
			if gws := linked[service]; len(gws) > 0 {
				return gatewayInstances(s.cfg.Catalog, gws, dc, s.b.dc)
			}
			insts, ok := bySvc[service]
			if !ok && bySvc == nil {
				insts = s.cfg.Catalog.ConnectProxies(service)
			}
			var inDC []catalog.ServiceInstance
			for _, inst := range insts {
				if inst.Datacenter == dc || (inst.Datacenter == "" && dc == s.b.dc) {
					inDC = append(inDC, inst)
				}
			}
			return inDC
		},
		get: s.cfg.Catalog.Get,
		gateways: func(mode, dc string) []catalog.ServiceInstance {
			return meshGatewayInstances(s.cfg.Catalog, mode, dc, s.b.dc)
		},
		linked: func(service string) bool { return len(linked[service]) > 0 },
	}
}

// commitProxy publishes a checked proxy and moves its references.
func (s *Server) commitProxy(id string, res *proxyResources, p *plan) {
	old := s.rec.proxies[id]
	keep := map[string]bool{}
	p.committed = append(p.committed, id)
	st := &proxyState{service: res.service, linked: res.linked, upstreams: res.upstreams}
	for _, r := range res.routes {
		p.set(routeType, op{node: id, name: r.GetName(), msg: r})
		st.routes = append(st.routes, r.GetName())
		keep[r.GetName()] = true
	}
	for _, l := range res.listeners {
		p.set(listenerType, op{node: id, name: l.GetName(), msg: l})
		st.listeners = append(st.listeners, l.GetName())
		keep[l.GetName()] = true
	}
	for _, c := range res.clusters {
		p.set(clusterType, op{node: id, name: c.GetName(), msg: c})
		st.clusters = append(st.clusters, c.GetName())
		keep[c.GetName()] = true
	}
	if old != nil {
		for _, n := range old.listeners {
			if !keep[n] {
				p.listeners = append(p.listeners, op{node: id, name: n})
			}
		}
		for _, n := range old.clusters {
			if !keep[n] {
				p.clusterDels = append(p.clusterDels, op{node: id, name: n})
			}
		}
		for _, n := range old.routes {
			if !keep[n] {
				p.routeDels = append(p.routeDels, op{node: id, name: n})
			}
		}
		s.release(id, old)
	}
	for _, k := range res.upstreams {
		addRef(s.rec.claRefs, k, id)
	}
	for _, svc := range res.leafServices() {
		addRef(s.rec.leafRefs, svc, id)
	}
	s.rec.proxies[id] = st
}

// removeProxy withdraws a proxy's listeners, then its clusters.
func (s *Server) removeProxy(id string, p *plan) {
	old := s.rec.proxies[id]
	if old == nil {
		return
	}
	for _, n := range old.listeners {
		p.listeners = append(p.listeners, op{node: id, name: n})
	}
	for _, n := range old.routes {
		p.routeDels = append(p.routeDels, op{node: id, name: n})
	}
	for _, n := range old.clusters {
		p.clusterDels = append(p.clusterDels, op{node: id, name: n})
	}
	s.release(id, old)
	delete(s.rec.proxies, id)
	s.cache.forgetBuilt(id)
	s.log.Debug("proxy resources removed", "proxy_id", id)
}

func (s *Server) release(id string, st *proxyState) {
	for _, k := range st.upstreams {
		dropRef(s.rec.claRefs, k, id)
	}
	dropRef(s.rec.leafRefs, st.service, id)
	for _, svc := range st.linked {
		dropRef(s.rec.leafRefs, svc, id)
	}
}

func addRef[K comparable](m map[K]map[string]struct{}, k K, id string) {
	if m[k] == nil {
		m[k] = map[string]struct{}{}
	}
	m[k][id] = struct{}{}
}

func dropRef[K comparable](m map[K]map[string]struct{}, k K, id string) {
	delete(m[k], id)
	if len(m[k]) == 0 {
		delete(m, k)
	}
}

// planProxyless keeps the shared listener/cluster/endpoints named <svc>
// for every touched service that has plain (non-proxy) instances.
func (s *Server) planProxyless(ch changes, p *plan) {
	exists := func(typeURL, name string) bool {
		return p.planned[typeURL+"\x00"+name] || s.cache.has(typeURL, "", name)
	}
	for svc := range ch.services {
		var plain []catalog.ServiceInstance
		connect := false
		for _, inst := range s.cfg.Catalog.Service(svc) {
			if inst.Kind == catalog.KindTypical {
				plain = append(plain, inst)
				// Only this node's connect apps need their leaf held
				// here; another node's agent holds its own.
				connect = connect || (inst.Connect && s.isLocal(inst))
			}
		}
		s.setApps(svc, connect)
		if len(plain) == 0 {
			if s.rec.proxyless[svc] {
				p.listeners = append(p.listeners, op{name: svc})
				p.clusterDels = append(p.clusterDels, op{name: svc})
				p.endpointDels = append(p.endpointDels, op{name: svc})
				delete(s.rec.proxyless, svc)
			}
			continue
		}
		l, c, cla, err := proxylessResources(svc, s.b.dc, plain)
		if err == nil {
			p.set(endpointType, op{name: svc, msg: cla})
			err = checkConsistent([]proto.Message{l}, []proto.Message{c}, nil, exists)
		}
		if err != nil {
			s.log.Error("failed to build proxyless resources", "service", svc, "error", err)
			continue
		}
		p.set(clusterType, op{name: svc, msg: c})
		p.set(listenerType, op{name: svc, msg: l})
		s.rec.proxyless[svc] = true
	}
}

// planGC drops shared endpoints and leaves no proxy references any more.
func (s *Server) planGC(p *plan) {
	gone := map[string]bool{}
	for k := range s.rec.clas {
		if len(s.rec.claRefs[k]) == 0 {
			name := k.clusterName(s.b.trustDomain)
			gone[name] = true
			p.endpointDels = append(p.endpointDels, op{name: name})
			delete(s.rec.clas, k)
			delete(s.rec.claSpecs, k)
			delete(s.rec.filterErrs, k)
		}
	}
	p.endpoints = without(p.endpoints, gone)
	gone = map[string]bool{}
	for svc := range s.rec.leaves {
		if len(s.rec.leafRefs[svc]) == 0 {
			gone[LeafSecretName(svc)] = true
			p.secretDels = append(p.secretDels, op{name: LeafSecretName(svc)})
			delete(s.rec.leaves, svc)
		}
	}
	p.secrets = without(p.secrets, gone)
}

func without(ops []op, gone map[string]bool) []op {
	if len(gone) == 0 {
		return ops
	}
	out := ops[:0]
	for _, o := range ops {
		if o.node != "" || !gone[o.name] {
			out = append(out, o)
		}
	}
	return out
}

// apply publishes a plan: secrets and endpoints before the clusters that
// use them, clusters before listeners; removals in the reverse order.
func (s *Server) apply(p *plan) {
	steps := []struct {
		typeURL string
		ops     []op
	}{
		{secretType, p.secrets}, {endpointType, p.endpoints}, {clusterType, p.clusters}, {routeType, p.routes},
		{listenerType, p.listeners},
		{routeType, p.routeDels}, {clusterType, p.clusterDels}, {endpointType, p.endpointDels}, {secretType, p.secretDels},
	}
	for _, st := range steps {
		if len(st.ops) == 0 {
			continue
		}
		if err := s.cache.publish(st.typeURL, st.ops); err != nil {
			s.log.Error("failed to publish resources", "type", typeLabel(st.typeURL), "error", err)
		}
	}
	s.cache.markBuilt(p.committed)
	for _, t := range []string{listenerType, routeType, clusterType, endpointType, secretType} {
		s.m.resources.WithLabelValues(typeLabel(t)).Set(float64(s.cache.count(t)))
	}
}
