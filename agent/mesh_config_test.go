package agent

import (
	"context"
	"os"
	"strings"
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

// A client-only agent caches the config entries it applied and loads
// them at the next start, so restored proxies keep their routes before
// the servers' feed arrives; a corrupt cache is ignored whole; the cache
// is written only for a new index.
func TestConfigEntriesCache(t *testing.T) {
	dir := t.TempDir()
	a := &Agent{cfg: &Config{DataDir: dir}, logger: testLogger(), mesh: &mesh{}}
	res := &consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "b", DefaultSubset: "v1", ConnectTimeout: 2 * time.Second,
		Subsets: map[string]consul.ServiceResolverSubset{"v1": {Filter: "Service.Meta.version == v1"}}, CreateIndex: 3, ModifyIndex: 5}
	set := configentry.NewSet(res, &consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "b", Protocol: "http", CreateIndex: 2, ModifyIndex: 2})
	a.cacheConfigEntries(set, 5)
	path := configCachePath(dir)

	b := &Agent{cfg: &Config{DataDir: dir}, logger: testLogger(), mesh: &mesh{}}
	reg := configentry.NewRegistry()
	b.restoreConfigEntries(reg)
	got, index := reg.Current()
	r, _ := got.Get(consul.ServiceResolver, "b").(*consul.ServiceResolverConfigEntry)
	if index != 5 || got.Len() != 2 || r == nil || r.ConnectTimeout != 2*time.Second || r.Subsets["v1"].Filter != res.Subsets["v1"].Filter ||
		r.ModifyIndex != 5 || r.CreateIndex != 3 || b.mesh.configIndex != 5 {
		t.Fatalf("restored %v at %d (resolver %+v)", got.List(""), index, r)
	}
	// The same index again is not written; a new one is.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	b.cacheConfigEntries(set, 5)
	if _, err := os.Stat(path); err == nil {
		t.Fatal("cache rewritten for an unchanged index")
	}
	b.cacheConfigEntries(set.Without(configentry.Key{Kind: consul.ServiceResolver, Name: "b"}), 6)
	if s, i, err := loadConfigCache(path); err != nil || i != 6 || s.Len() != 1 {
		t.Fatalf("cache after a new index = %v, %d, %v", s, i, err)
	}

	// Corrupt (one entry does not decode): ignored whole.
	if err := os.WriteFile(path, []byte(`{"Index":9,"Entries":[{"Key":"service-defaults/b","Value":"e30="}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &Agent{cfg: &Config{DataDir: dir}, logger: testLogger(), mesh: &mesh{}}
	reg2 := configentry.NewRegistry()
	c.restoreConfigEntries(reg2)
	if s, i := reg2.Current(); s.Len() != 0 || i != 0 || c.mesh.configIndex != 0 {
		t.Fatalf("a corrupt cache was applied: %v at %d", s.List(""), i)
	}
	// No cache at all: nothing happens.
	d := &Agent{cfg: &Config{DataDir: t.TempDir()}, logger: testLogger(), mesh: &mesh{}}
	d.restoreConfigEntries(configentry.NewRegistry())
}

// A client-only agent's config writes go through a server (the rpc call),
// are checked and stored there, and reach both agents' registries; the
// client caches what it applied.
func TestConfigEntriesThroughAClientOnlyAgent(t *testing.T) {
	srv := startAgent(t, t.TempDir())
	t.Cleanup(func() { _ = srv.Shutdown() })
	dir := t.TempDir()
	cl := startAgentWith(t, dir, func(cfg *Config) {
		cfg.Cluster = ClusterConfig{Client: true, Servers: []string{srv.RPCAddr()}}
		cfg.NodeName = "test-client"
	})
	t.Cleanup(func() { _ = cl.Shutdown() })
	if cl.mesh.store != nil {
		t.Fatal("the client-only agent opened the servers' store")
	}
	c, err := consul.NewClient(&consul.Config{Address: cl.ControlPlane().HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	ok, _, err := c.ConfigEntries().Set(&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "web", Protocol: "grpc"}, nil)
	if err != nil || !ok {
		t.Fatalf("Set through the client = %v, %v", ok, err)
	}
	set, index := cl.mesh.configEntries.Current()
	if e, _ := set.Get(configentry.ServiceDefaults, "web").(*consul.ServiceConfigEntry); e == nil || e.Protocol != "grpc" || index == 0 {
		t.Fatalf("client registry after its write = %v at %d", set.List(""), index)
	}
	testutil.WaitFor(t, 10*time.Second, "the entry in the server's registry", func() bool {
		s, i := srv.mesh.configEntries.Current()
		return s.Get(configentry.ServiceDefaults, "web") != nil && i == index
	})
	_, _, err = c.ConfigEntries().Set(&consul.ServiceConfigEntry{Kind: "service-nope", Name: "x"}, nil)
	if err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("an unknown kind through the client = %v, want a 400", err)
	}
	testutil.WaitFor(t, 10*time.Second, "the client's cache", func() bool {
		s, i, err := loadConfigCache(configCachePath(dir))
		return err == nil && i == index && s.Len() == 1
	})
	if _, err := c.ConfigEntries().Delete(consul.ServiceDefaults, "web", nil); err != nil {
		t.Fatalf("Delete through the client = %v", err)
	}
	if s, _ := cl.mesh.configEntries.Current(); s.Len() != 0 {
		t.Fatalf("client registry after its delete = %v", s.List(""))
	}
}
