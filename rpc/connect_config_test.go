package rpc

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/internal/tlsutil"
	"github.com/meshlet/meshlet/structs"
)

// configConnect is fakeConnect with config entries kept in memory; an
// entry named "conflict" is refused with ErrConflict, as the servers'
// store refuses one that does not fit the others.
type configConnect struct {
	*fakeConnect
	mu    sync.Mutex
	set   *configentry.Set
	index uint64
}

func (c *configConnect) PutConfigEntry(_ context.Context, e configentry.Entry, cas *uint64) (bool, uint64, error) {
	if err := configentry.Validate(e); err != nil {
		return false, 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.GetName() == "conflict" {
		return false, c.index, fmt.Errorf("%w: %s needs a resolver", configentry.ErrConflict, e.GetName())
	}
	cur := c.set.Get(e.GetKind(), e.GetName())
	if cas != nil && ((*cas == 0 && cur != nil) || (*cas != 0 && (cur == nil || cur.GetModifyIndex() != *cas))) {
		return false, c.index, nil
	}
	c.index++
	c.set = c.set.With(e)
	return true, c.index, nil
}

func (c *configConnect) DeleteConfigEntry(_ context.Context, k configentry.Key, cas *uint64) (bool, uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cas != nil {
		return false, c.index, nil
	}
	c.index++
	c.set = c.set.Without(k)
	return true, c.index, nil
}

func newConfigMeshFixture(t *testing.T) (*meshFixture, *configConnect) {
	t.Helper()
	p := newPKI(t)
	srvTLS, dial := p.serverTLSPair("server")
	cc := &configConnect{fakeConnect: newFakeConnect(t), set: configentry.NewSet()}
	m := &meshFixture{p: p, b: newFakeBackend(), f: cc.fakeConnect}
	m.s, m.addr = startConnectServer(t, m.b, cc, srvTLS, dial, nil)
	m.c = newTestClient(t, []string{m.addr}, p.clientTLS(tlsutil.RoleClient, "c1"), "node-1", "s1")
	if err := m.c.RegisterNode(ctxT(t, 10*time.Second), &structs.Node{ID: "node-1"}); err != nil {
		t.Fatalf("RegisterNode: %v", err)
	}
	return m, cc
}

// Config entry writes go through the servers; the entries' refusals keep
// their sentinel and the servers' text on the client.
func TestConnectConfigEntries(t *testing.T) {
	m, cc := newConfigMeshFixture(t)
	ctx := ctxT(t, 10*time.Second)
	w := m.c.ConnectConfigEntries()
	web := &consul.ServiceResolverConfigEntry{Kind: consul.ServiceResolver, Name: "web", ConnectTimeout: 3 * time.Second,
		Subsets: map[string]consul.ServiceResolverSubset{"v1": {Filter: "Service.Meta.version == v1"}}}
	ok, idx, err := w.PutConfigEntry(ctx, web, nil)
	if err != nil || !ok || idx != 1 {
		t.Fatalf("PutConfigEntry = %v, %d, %v", ok, idx, err)
	}
	cc.mu.Lock()
	got, _ := cc.set.Get(consul.ServiceResolver, "web").(*consul.ServiceResolverConfigEntry)
	cc.mu.Unlock()
	if got == nil || got.ConnectTimeout != 3*time.Second || got.Subsets["v1"].Filter != "Service.Meta.version == v1" {
		t.Fatalf("the servers stored %#v", got)
	}
	zero := uint64(0)
	if ok, _, err := w.PutConfigEntry(ctx, web, &zero); err != nil || ok {
		t.Fatalf("cas=0 over an existing entry = %v, %v; want false", ok, err)
	}
	_, _, err = w.PutConfigEntry(ctx, &consul.ServiceConfigEntry{Kind: "service-nope", Name: "x"}, nil)
	wantErr(t, "unknown kind", err, configentry.ErrUnknownKind)
	wantNot(t, "unknown kind", err, configentry.ErrInvalid, ErrBadRequest, ErrNoServers)
	_, _, err = w.PutConfigEntry(ctx, &consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "conflict"}, nil)
	wantErr(t, "conflict", err, configentry.ErrConflict)
	if err.Error() != "config entry conflicts with other entries: conflict needs a resolver" {
		t.Fatalf("error text %q, want the server's", err)
	}
	if ok, idx, err := w.DeleteConfigEntry(ctx, configentry.Key{Kind: consul.ServiceResolver, Name: "web"}, nil); err != nil || !ok || idx != 2 {
		t.Fatalf("DeleteConfigEntry = %v, %d, %v", ok, idx, err)
	}
	if cc.set.Len() != 0 {
		t.Fatalf("servers hold %v after the delete", cc.set.List(""))
	}
	for _, body := range []string{`{"Op":"drop"}`, `{"Op":"delete","Kind":"service-defaults"}`, `{"Op":"put"}`} {
		if got := rawStatus(t, m, http.MethodPost, pathConnectConfig, body, "s1"); got != http.StatusBadRequest {
			t.Fatalf("%s: status %d, want 400", body, got)
		}
	}
	if got := rawStatus(t, m, http.MethodPost, pathConnectConfig, `{"Op":"delete","Kind":"service-defaults","Name":"x"}`, "wrong"); got != http.StatusForbidden {
		t.Fatalf("wrong secret: status %d, want 403", got)
	}
}

// A server whose backend keeps no config entries says so.
func TestConnectConfigNotServed(t *testing.T) {
	m := newMeshFixture(t)
	_, _, err := m.c.ConnectConfigEntries().DeleteConfigEntry(ctxT(t, 10*time.Second), configentry.Key{Kind: "service-defaults", Name: "x"}, nil)
	wantErr(t, "config call to a server without config entries", err, ErrConnectNotServed)
}

func (c *configConnect) ConfigEntries(context.Context) (*configentry.Set, uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.set, c.index, nil
}

// A node running a terminating gateway gets leaves signed for the services
// its terminating-gateway config entry links (written with `config
// write`, not in the job), and still none for others; a node that runs no
// such gateway gets none.
func TestConnectSignEntryLinkedService(t *testing.T) {
	m, _ := newConfigMeshFixture(t)
	ctx := ctxT(t, 10*time.Second)
	gw := &structs.Service{Name: "tgw", Connect: &structs.ConsulConnect{Gateway: &structs.ConsulGateway{
		Terminating: &structs.ConsulTerminatingConfigEntry{Services: []*structs.ConsulLinkedService{{Name: "legacy-db"}}}}}}
	job := &structs.Job{ID: "tgw", TaskGroups: []*structs.TaskGroup{{Name: "gw", Services: []*structs.Service{gw}}}}
	m.b.addAlloc(&structs.Allocation{ID: "a1", NodeID: "node-1", TaskGroup: "gw", Job: job,
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning})
	sign := func(svc string) error {
		csr, _ := makeCSR(t, "")
		_, err := m.c.SignCSR(ctx, svc, csr)
		return err
	}
	wantErr(t, "sign a service no entry links yet", sign("billing"), ErrForbidden)
	entry := &consul.TerminatingGatewayConfigEntry{Kind: consul.TerminatingGateway, Name: "tgw",
		Services: []consul.LinkedService{{Name: "legacy-db"}, {Name: "billing"}}}
	if ok, _, err := m.c.ConnectConfigEntries().PutConfigEntry(ctx, entry, nil); err != nil || !ok {
		t.Fatalf("PutConfigEntry: %v, %v", ok, err)
	}
	if err := sign("billing"); err != nil {
		t.Errorf("SignCSR(billing), linked by the entry: %v", err)
	}
	wantErr(t, "sign a service neither the job nor the entry links", sign("payments"), ErrForbidden)

	other := &consul.TerminatingGatewayConfigEntry{Kind: consul.TerminatingGateway, Name: "elsewhere",
		Services: []consul.LinkedService{{Name: "payments"}}}
	if ok, _, err := m.c.ConnectConfigEntries().PutConfigEntry(ctx, other, nil); err != nil || !ok {
		t.Fatalf("PutConfigEntry: %v, %v", ok, err)
	}
	wantErr(t, "sign a service linked by a gateway the node does not run", sign("payments"), ErrForbidden)
}
