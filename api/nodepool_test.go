package api_test

import (
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/api/apitest"
)

// Every node is in Nomad's "default" node pool: GET /v1/node/:id says so
// as GET /v1/nodes does (`nomad node status <id>` printed an empty pool).
func TestNodeInfoNodePool(t *testing.T) {
	srv := newTestServer(t, apitest.NewBackend())
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	stubs, _, err := c.Nodes().List(nil)
	if err != nil || len(stubs) != 1 {
		t.Fatalf("List = %+v, %v", stubs, err)
	}
	n, _, err := c.Nodes().Info(stubs[0].ID, nil)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if n.NodePool != "default" || n.NodePool != stubs[0].NodePool || n.ID != apitest.NodeID || n.SchedulingEligibility != "eligible" {
		t.Fatalf("Info: node %s pool %q eligibility %q; want %s in the list's pool %q, eligible",
			n.ID, n.NodePool, n.SchedulingEligibility, apitest.NodeID, stubs[0].NodePool)
	}
}
