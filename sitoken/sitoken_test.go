package sitoken

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/aclstate"
	"github.com/meshlet/meshlet/internal/etcdembed"
	"github.com/meshlet/meshlet/internal/etcdembed/etcdtest"
	"github.com/meshlet/meshlet/structs"
)

var testMember *etcdembed.Member

func TestMain(m *testing.M) { etcdtest.Main(m, "sitoken", &testMember, nil) }

// allocTable is the servers' allocations, with read failures on demand.
type allocTable struct {
	mu     sync.Mutex
	allocs map[string]*structs.Allocation
	fail   map[string]bool
}

func (a *allocTable) Alloc(_ context.Context, id string) (*structs.Allocation, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail[id] {
		return nil, errors.New("state store unavailable")
	}
	return a.allocs[id], nil
}

func (a *allocTable) set(al *structs.Allocation) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.allocs[al.ID] = al
}

// connectAlloc is allocation id of a job whose group "g" has the app task
// "web", the injected sidecar of its connect service "web", and a task
// "sneaky" whose kind names service "db", which the group does not declare.
func connectAlloc(id, node string) *structs.Allocation {
	job := &structs.Job{ID: "j", Name: "j", TaskGroups: []*structs.TaskGroup{{Name: "g",
		Services: []*structs.Service{{Name: "web", Connect: &structs.ConsulConnect{SidecarService: &structs.ConsulSidecarService{}}}},
		Tasks: []*structs.Task{
			{Name: "connect-proxy-web", Kind: "connect-proxy:web"},
			{Name: "web"},
			{Name: "sneaky", Kind: "connect-proxy:db"},
		}}}}
	return &structs.Allocation{ID: id, NodeID: node, TaskGroup: "g", Job: job, Namespace: "default",
		ClientStatus: structs.AllocClientStatusRunning, DesiredStatus: structs.AllocDesiredStatusRun}
}

type fixture struct {
	allocs *allocTable
	store  *aclstate.EtcdStore
	m      *Minter
	res    *acl.Resolver
}

func newFixture(t *testing.T) *fixture {
	st := aclstate.Open(etcdtest.Client(t, testMember), aclstate.Options{Prefix: etcdtest.Prefix(t),
		ValidateRules: func(r string) error { _, err := acl.Parse(r); return err }})
	at := &allocTable{allocs: map[string]*structs.Allocation{}, fail: map[string]bool{}}
	return &fixture{allocs: at, store: st, m: NewMinter(at, st, nil), res: acl.NewResolver(st, acl.ResolverOptions{})}
}

// A node gets, for its own allocation's sidecar task, a stored token
// whose identity is the sidecar's service: write on it and its proxy,
// read elsewhere, nothing on other services' writes or the cluster.
func TestDeriveGrantsTheSidecarsService(t *testing.T) {
	f := newFixture(t)
	ctx := etcdtest.Ctx(t, 30*time.Second)
	f.allocs.set(connectAlloc("a1", "n1"))
	tok, err := f.m.Derive(ctx, "n1", "a1", "connect-proxy-web")
	if err != nil {
		t.Fatalf("Derive: %v", err)
	}
	if tok.SecretID == "" || tok.AllocID != "a1" || tok.TaskName != "connect-proxy-web" ||
		tok.Name != "_nomad_si [default] [a1] [connect-proxy-web]" {
		t.Fatalf("token = %+v", tok)
	}
	authz, got, err := f.res.Resolve(ctx, tok.SecretID)
	if err != nil {
		t.Fatalf("the minted secret does not resolve: %v", err)
	}
	if len(got.ServiceIdentities) != 1 || got.ServiceIdentities[0].ServiceName != "web" || got.SecretHash == "" {
		t.Errorf("stored token = %+v", got)
	}
	for svc, want := range map[string]bool{"web": true, "web-sidecar-proxy": true, "db": false, "web2": false} {
		if authz.AllowServiceWrite(svc) != want {
			t.Errorf("service:write on %q = %v, want %v", svc, !want, want)
		}
	}
	if !authz.AllowServiceRead("db") || authz.IsManagement() || authz.AllowNamespaceOperation("default", "submit-job") ||
		authz.AllowOperatorWrite() || authz.AllowIntentionWrite("web") {
		t.Error("a service identity grants more (or less) than its service: read on others, nothing else")
	}
}

func TestDeriveRefusals(t *testing.T) {
	f := newFixture(t)
	ctx := etcdtest.Ctx(t, 30*time.Second)
	f.allocs.set(connectAlloc("a1", "n1"))
	stopping := connectAlloc("a2", "n1")
	stopping.DesiredStatus = structs.AllocDesiredStatusStop
	f.allocs.set(stopping)
	done := connectAlloc("a3", "n1")
	done.ClientStatus = structs.AllocClientStatusComplete
	f.allocs.set(done)
	for _, c := range []struct {
		name, node, alloc, task string
		want                    error
	}{
		{"another node's allocation", "n2", "a1", "connect-proxy-web", ErrRefused},
		{"the app task", "n1", "a1", "web", ErrRefused},
		{"a task the group lacks", "n1", "a1", "connect-proxy-db", ErrRefused},
		{"a task whose kind names an undeclared service", "n1", "a1", "sneaky", ErrRefused},
		{"a stopping allocation", "n1", "a2", "connect-proxy-web", ErrRefused},
		{"an ended allocation", "n1", "a3", "connect-proxy-web", ErrRefused},
		{"an unknown allocation", "n1", "zz", "connect-proxy-web", ErrUnknownAlloc},
	} {
		if _, err := f.m.Derive(ctx, c.node, c.alloc, c.task); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	toks, _, err := f.store.ListTokens(ctx)
	if err != nil || len(toks) != 0 {
		t.Errorf("refusals stored %d tokens (%v)", len(toks), err)
	}
}

// The sweep revokes the tokens of ended and vanished allocations, keeps
// running and stopping ones' (their sidecars still drain) and those of
// an allocation it cannot read, and leaves other tokens alone.
func TestSweepRevokesEndedAllocations(t *testing.T) {
	f := newFixture(t)
	ctx := etcdtest.Ctx(t, 30*time.Second)
	secrets := map[string]string{}
	for _, id := range []string{"run", "stop", "end", "gone", "unreadable"} {
		f.allocs.set(connectAlloc(id, "n1"))
		tok, err := f.m.Derive(ctx, "n1", id, "connect-proxy-web")
		if err != nil {
			t.Fatal(err)
		}
		secrets[id] = tok.SecretID
	}
	other, err := f.store.UpsertToken(ctx, &acl.Token{Name: "operator", Type: acl.TypeManagement})
	if err != nil {
		t.Fatal(err)
	}
	f.allocs.mu.Lock()
	f.allocs.allocs["stop"].DesiredStatus = structs.AllocDesiredStatusStop
	f.allocs.allocs["end"].ClientStatus = structs.AllocClientStatusFailed
	delete(f.allocs.allocs, "gone")
	f.allocs.fail["unreadable"] = true
	f.allocs.mu.Unlock()

	n, err := f.m.Sweep(ctx)
	if n != 2 || err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Fatalf("Sweep = %d, %v; want 2 revoked and the unreadable allocation's error", n, err)
	}
	f.res.Invalidate()
	for id, want := range map[string]bool{"run": true, "stop": true, "end": false, "gone": false, "unreadable": true} {
		_, _, err := f.res.Resolve(ctx, secrets[id])
		if (err == nil) != want {
			t.Errorf("allocation %q's token resolves = %v, want %v", id, err == nil, want)
		}
	}
	if _, err := f.store.Token(ctx, other.AccessorID); err != nil {
		t.Errorf("the sweep touched a token bound to no allocation: %v", err)
	}
}
