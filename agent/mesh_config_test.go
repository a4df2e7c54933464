package agent

import (
	"context"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/testutil"
)

// An entry written through the agent's Consul-shaped API is stored in
// etcd and reaches the agent's registry (the one xDS compiles) before the
// write answers; a restarted agent finds it again, and deletes go the
// same way.
func TestConfigEntriesThroughTheAgent(t *testing.T) {
	dir := t.TempDir()
	a := startAgent(t, dir)
	c, err := consul.NewClient(&consul.Config{Address: a.ControlPlane().HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	ok, _, err := c.ConfigEntries().Set(&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "web", Protocol: "http"}, nil)
	if err != nil || !ok {
		t.Fatalf("Set = %v, %v", ok, err)
	}
	set, index := a.mesh.configEntries.Current()
	web, _ := set.Get(configentry.ServiceDefaults, "web").(*consul.ServiceConfigEntry)
	if web == nil || web.Protocol != "http" || index == 0 || web.ModifyIndex != index {
		t.Fatalf("registry after the write = %v at index %d", set.List(""), index)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := a.etcdMember.Client().Get(ctx, DefaultEtcdPrefix+"connect/config/entries/service-defaults/web")
	if err != nil || len(resp.Kvs) != 1 || uint64(resp.Kvs[0].ModRevision) != web.ModifyIndex {
		t.Fatalf("etcd holds %v, %v; want the entry at revision %d", resp, err, web.ModifyIndex)
	}
	got, qm, err := c.ConfigEntries().Get(consul.ServiceDefaults, "web", nil)
	if err != nil || got.GetModifyIndex() != web.ModifyIndex || qm.LastIndex != index {
		t.Fatalf("Get = %v, %+v, %v", got, qm, err)
	}
	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}

	b := startAgent(t, dir)
	t.Cleanup(func() { _ = b.Shutdown() })
	testutil.WaitFor(t, 15*time.Second, "the stored entry in the restarted agent's registry", func() bool {
		set, i := b.mesh.configEntries.Current()
		e := set.Get(configentry.ServiceDefaults, "web")
		return e != nil && e.GetModifyIndex() == web.ModifyIndex && i == index
	})
	c2, err := consul.NewClient(&consul.Config{Address: b.ControlPlane().HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.ConfigEntries().Delete(consul.ServiceDefaults, "web", nil); err != nil {
		t.Fatal(err)
	}
	if set, i := b.mesh.configEntries.Current(); set.Len() != 0 || i <= index {
		t.Fatalf("registry after the delete = %v at %d", set.List(""), i)
	}
}
