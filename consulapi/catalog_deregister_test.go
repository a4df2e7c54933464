package consulapi

import (
	"context"
	"testing"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/catalog"
)

// clusterCatalog is the cluster's side of a server agent's external
// registrations, as the servers' store is: it holds registrations this
// agent's copy has not seen yet (made through another server a moment
// ago) and judges a delete's precondition on them.
type clusterCatalog struct{ cat *catalog.Catalog }

func (c clusterCatalog) PutExternal(_ context.Context, inst catalog.ServiceInstance) error {
	c.cat.Register(inst)
	return nil
}

func (c clusterCatalog) DeleteExternal(_ context.Context, inst catalog.ServiceInstance, pre func([]catalog.ServiceInstance) error) error {
	old, ok := c.cat.Get(inst.ID)
	if !ok || old.NodeID != inst.NodeID {
		return nil
	}
	if pre != nil {
		if err := pre([]catalog.ServiceInstance{old}); err != nil {
			return err
		}
	}
	c.cat.DeregisterAlloc(old.AllocID)
	return nil
}

// nodeWriter may write nodes and the web service, not db.
type nodeWriter struct{ webTeam }

func (nodeWriter) AllowNodeWrite() bool { return true }

// A catalog deregistration of an ID this agent's copy does not know yet
// is judged on the registration the store deletes: node write without
// service write on db cannot remove db's, while a truly unknown ID is
// still answered true.
func TestCatalogDeregisterJudgedOnClusterState(t *testing.T) {
	cluster := clusterCatalog{cat: catalog.New()}
	f := newACLFixtureWith(t, func(a *acl.ACL) authorizer { return nodeWriter{webTeam{a}} },
		func(s *Server) { s.d.CatalogWriter = cluster })
	for _, name := range []string{"db", "web"} {
		cluster.cat.Register(catalog.ServiceInstance{ID: name + "-ext", Name: name, Address: "10.0.0.9", Port: 5432,
			NodeID: catalog.ExternalNodePrefix + "legacy", NodeName: "legacy", AllocID: externalAllocID(name + "-ext"), Healthy: true})
	}
	if _, ok := f.cat.Get("db-ext"); ok {
		t.Fatal("the agent's copy must not know db-ext for this test")
	}
	team := f.as(t, f.team).Catalog()
	dereg := func(id string) error {
		_, err := team.Deregister(&consul.CatalogDeregistration{Node: "legacy", ServiceID: id}, nil)
		return err
	}
	wantStatus(t, "node writer's deregistration of db-ext", dereg("db-ext"), 403, "Permission denied")
	if _, ok := cluster.cat.Get("db-ext"); !ok {
		t.Fatal("the refused deregistration removed db-ext")
	}
	if err := dereg("no-such-service"); err != nil {
		t.Fatalf("deregistration of an unknown ID: %v", err)
	}
	if err := dereg("web-ext"); err != nil {
		t.Fatalf("node writer's deregistration of web-ext: %v", err)
	}
	if _, ok := cluster.cat.Get("web-ext"); ok {
		t.Fatal("web-ext still registered")
	}
	mgmt := f.as(t, f.mgmt).Catalog()
	if _, err := mgmt.Deregister(&consul.CatalogDeregistration{Node: "legacy", ServiceID: "db-ext"}, nil); err != nil {
		t.Fatalf("management deregistration of db-ext: %v", err)
	}
	if _, ok := cluster.cat.Get("db-ext"); ok {
		t.Fatal("db-ext still registered")
	}
}
