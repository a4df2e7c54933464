package agent

import (
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
)

// TestOfficialClientSeesTheCluster: the official client lists the node
// with its status, eligibility and resources, the server among the
// members (alive, leader, its etcd role), and the leader's RPC address.
func TestOfficialClientSeesTheCluster(t *testing.T) {
	a := startAgent(t, t.TempDir())
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: "http://" + a.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	nodes, _, err := c.Nodes().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || nodes[0].Status != "ready" || nodes[0].SchedulingEligibility != "eligible" {
		t.Fatalf("Nodes().List = %+v, want one ready, eligible node", nodes)
	}
	node, _, err := c.Nodes().Info(nodes[0].ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if node.NodeResources == nil || node.NodeResources.Cpu.CpuShares <= 0 || node.NodeResources.Memory.MemoryMB <= 0 {
		t.Errorf("node resources = %+v, want the fingerprinted cpu and memory", node.NodeResources)
	}
	var generic map[string]any
	if _, err := c.Raw().Query("/v1/node/"+node.ID, &generic, nil); err != nil {
		t.Fatal(err)
	}
	if s, ok := generic["SecretID"]; ok && s != "" {
		t.Error("GET /v1/node returned the node's secret")
	}
	members, err := c.Agent().Members()
	if err != nil {
		t.Fatal(err)
	}
	if len(members.Members) != 1 {
		t.Fatalf("Agent().Members() = %+v, want this server", members.Members)
	}
	m := members.Members[0]
	if m.Status != "alive" || m.Tags["leader"] != "true" || m.Tags["etcd_role"] != "leader" {
		t.Errorf("member = %+v, want alive, leader, etcd leader", m)
	}
	leader, err := c.Status().Leader()
	if err != nil {
		t.Fatal(err)
	}
	if leader != a.RPCAddr() {
		t.Errorf("Status().Leader() = %q, want this server's RPC address %q", leader, a.RPCAddr())
	}
}
