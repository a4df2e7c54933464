package xds

// Draining proxies. A proxy that leaves the catalog while its xDS stream
// is open is usually a sidecar in its allocation's shutdown_delay (the
// services are deregistered first so that callers stop choosing it, then
// the tasks are killed): it must go on serving the requests still coming
// in and the calls its application still makes. Consul ends such a
// proxy's stream and Envoy keeps its last configuration; withdrawing its
// listeners, clusters and leaf instead would cut both. So its published
// resources (and its leaf hold, so the leaf is still renewed) stay as they
// are, never rebuilt, until its last stream closes; then they are removed
// as for any proxy that left. A stream of such a proxy that reconnects
// after that is accepted and waits (its allocation's socket declares it,
// see allocproxies.go), so the proxy keeps its last configuration.

// keepDraining reports whether proxy id, no longer in the catalog, keeps
// its published resources for now: it had some and a stream is open.
func (s *Server) keepDraining(id string) bool {
	if _, published := s.rec.proxies[id]; !published || !s.tracker.connected(id) {
		delete(s.rec.draining, id)
		return false
	}
	if !s.rec.draining[id] {
		s.rec.draining[id] = true
		s.log.Info("proxy left the catalog; its configuration stays until its xDS stream ends", "proxy_id", id)
	}
	return true
}
