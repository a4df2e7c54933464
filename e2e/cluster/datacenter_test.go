package cluster

import "fmt"

// AddClientDC starts a client in datacenter dc (the agent's `datacenter`):
// meshlet's datacenters are groups of nodes of the same servers, matched
// by jobs' `datacenters` and named in the identities of their services.
func (c *cluster) AddClientDC(name string, host int, dc string, servers ...*agent) *agent {
	c.t.Helper()
	return c.add(name, host, false, fmt.Sprintf("datacenter = %q\n", dc)+c.clientConfig(servers))
}
