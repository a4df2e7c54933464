package xds

import "github.com/meshlet/meshlet/catalog"

// Warm-up: a connect proxy that (re)connects before the reconciler has built
// its resources (just after the agent restarted, or in the coalescing window
// after its registration) must not be told that what it already holds is
// gone. Its delta stream claims the resources it got from the previous
// server (initial_resource_versions); answering before they are built would
// send them as removed_resources, and the proxy would drop its listeners,
// clusters and endpoints until the next push: new connections through it
// fail meanwhile. So every watch of such a node waits, unanswered, until the
// reconciler publishes the node's listeners (the last type of a plan, so its
// secrets, endpoints and clusters are in place by then).

// awaitingBuild reports whether w's node is a registered connect proxy whose
// resources are not built yet. Callers hold c.mu.
func (c *xdsCache) awaitingBuild(w *watch) bool {
	return w.node != "" && c.expected != nil && !c.isBuilt(w.node) && c.expected(w.node)
}

// isBuilt reports whether node's resources were published: it has
// listeners, or the reconciler said so (a proxy may have none: a
// terminating gateway before its config entry, a mesh gateway with
// nothing to route). Callers hold c.mu.
func (c *xdsCache) isBuilt(node string) bool {
	return c.done[node] || c.nodes[listenerType][node] != nil
}

// markBuilt records that the reconciler published the resources of nodes
// (whatever they hold) and answers their parked watches.
func (c *xdsCache) markBuilt(nodes []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range nodes {
		c.done[n] = true
		c.built(n)
	}
}

// forgetBuilt drops node's mark when its proxy leaves: registered again,
// it waits for its build anew.
func (c *xdsCache) forgetBuilt(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.done, node)
}

// wait parks w until its node is built; reply is what its first answer
// owes (a first request is answered even when empty). Callers hold c.mu.
func (c *xdsCache) wait(w *watch, reply bool) {
	w.reply = w.reply || reply
	set := c.waiting[w.node]
	if set == nil {
		set = watchSet{}
		c.waiting[w.node] = set
	}
	set[w.id] = w
}

// built answers the watches parked for node once its listeners exist.
// Callers hold c.mu.
func (c *xdsCache) built(node string) {
	set := c.waiting[node]
	if len(set) == 0 || !c.isBuilt(node) {
		return
	}
	delete(c.waiting, node)
	for _, w := range set {
		if c.respond(w, w.reply) {
			c.untrack(w)
		}
	}
}

// unwait forgets a parked watch (its stream went away). Callers hold c.mu.
func (c *xdsCache) unwait(w *watch) {
	if set := c.waiting[w.node]; set != nil {
		delete(set, w.id)
		if len(set) == 0 {
			delete(c.waiting, w.node)
		}
	}
}

// expectProxy tells whether node is a connect proxy registered in the
// catalog, or one an allocation socket declares (registered again soon, or
// draining: what it holds is not taken from it): the nodes whose watches
// wait for their resources to be built.
func (s *Server) expectProxy(node string) bool {
	_, ok := s.localProxy(node)
	return ok || s.declared.has(node)
}

// localProxy returns the connect proxy id when it is registered in the
// catalog and runs on this server's node.
func (s *Server) localProxy(id string) (catalog.ServiceInstance, bool) {
	inst, ok := s.cfg.Catalog.Get(id)
	if !ok || !catalog.IsProxyKind(inst.Kind) || !s.isLocal(inst) {
		return catalog.ServiceInstance{}, false
	}
	return inst, true
}

func (s *Server) isLocal(inst catalog.ServiceInstance) bool {
	return s.cfg.LocalProxy == nil || s.cfg.LocalProxy(inst)
}
