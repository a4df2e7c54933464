package xds

// Leaf references. The CA caches a leaf (a key and a renewal goroutine)
// while someone holds it; the xDS server holds the leaf of every service
// that has a registered connect-proxy (whether or not its stream is
// connected: a sidecar that reconnects must find its leaf) or a
// connect-enabled app instance (native connect apps fetch theirs over the
// HTTP API), and releases it when the last such registration leaves the
// catalog. The maps live in the reconciler and only its goroutine touches
// them.

// holdState is the reconciler's view of the leaves it holds.
type holdState struct {
	proxyOf  map[string]string              // proxy ID -> service it holds
	linkedOf map[string][]string            // gateway proxy ID -> linked services it holds
	proxies  map[string]map[string]struct{} // service -> proxy IDs
	apps     map[string]bool                // services with connect app instances
	releases map[string]func()              // service -> the CA hold's release
}

func newHoldState() holdState {
	return holdState{proxyOf: map[string]string{}, linkedOf: map[string][]string{}, proxies: map[string]map[string]struct{}{}, apps: map[string]bool{}, releases: map[string]func(){}}
}

// holdProxy records that proxy id (registered) serves service, taking the
// CA hold before any leaf of the service is fetched.
func (s *Server) holdProxy(id, service string) {
	h := &s.rec.holds
	if old, ok := h.proxyOf[id]; ok && old != service {
		dropRef(h.proxies, old, id)
	}
	h.proxyOf[id] = service
	addRef(h.proxies, service, id)
	s.acquireLeaf(service)
}

// holdLinked records the services a terminating gateway proxy id is
// linked to: it presents their leaves, so it holds them like its own.
func (s *Server) holdLinked(id string, services []string) {
	h := &s.rec.holds
	for _, svc := range h.linkedOf[id] {
		if svc != h.proxyOf[id] {
			dropRef(h.proxies, svc, id)
		}
	}
	delete(h.linkedOf, id)
	if len(services) == 0 {
		return
	}
	h.linkedOf[id] = services
	for _, svc := range services {
		addRef(h.proxies, svc, id)
		s.acquireLeaf(svc)
	}
}

// unholdProxy forgets a proxy that left the catalog.
func (s *Server) unholdProxy(id string) {
	h := &s.rec.holds
	s.holdLinked(id, nil)
	if old, ok := h.proxyOf[id]; ok {
		dropRef(h.proxies, old, id)
		delete(h.proxyOf, id)
	}
}

// setApps records whether service has connect app instances.
func (s *Server) setApps(service string, connect bool) {
	if connect {
		s.rec.holds.apps[service] = true
		s.acquireLeaf(service)
		return
	}
	delete(s.rec.holds.apps, service)
}

func (s *Server) acquireLeaf(service string) {
	h := &s.rec.holds
	if h.releases[service] != nil {
		return
	}
	release, err := s.cfg.Certs.HoldLeaf(service)
	if err != nil {
		s.log.Warn("failed to hold leaf certificate", "service", service, "error", err)
		return
	}
	h.releases[service] = release
}

// releaseUnused releases the leaves no registration needs any more.
func (s *Server) releaseUnused() {
	h := &s.rec.holds
	for svc, release := range h.releases {
		if len(h.proxies[svc]) == 0 && !h.apps[svc] {
			release()
			delete(h.releases, svc)
			s.log.Debug("released leaf certificate", "service", svc)
		}
	}
}

// releaseAll drops every hold (Stop, after the reconciler has ended).
func (s *Server) releaseAll() {
	for svc, release := range s.rec.holds.releases {
		release()
		delete(s.rec.holds.releases, svc)
	}
}
