package consulapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/api/apitest"
	"github.com/meshlet/meshlet/intention"
)

// aclFixture is the catalog fixture with ACLs over an in-memory store
// holding a management token and a "web-team" client token, whose ACL
// (through the authorizer seam) is webTeam.
type aclFixture struct {
	*fixture
	mgmt, team string // secrets
}

// webTeam grants what a web team's policy would: service and intention
// read and write on "web" only; no mesh, no operator.
type webTeam struct{ *acl.ACL }

func (webTeam) AllowServiceRead(name string) bool    { return name == "web" }
func (webTeam) AllowServiceWrite(name string) bool   { return name == "web" }
func (webTeam) AllowIntentionRead(dest string) bool  { return dest == "web" }
func (webTeam) AllowIntentionWrite(dest string) bool { return dest == "web" }
func (webTeam) AllowNodeWrite() bool                 { return false }

func withAuthorizer(f func(*acl.ACL, *acl.Token) authorizer) Option {
	return func(s *Server) { s.authzOf = f }
}

func newACLFixture(t *testing.T) *aclFixture {
	t.Helper()
	return newACLFixtureWith(t, func(a *acl.ACL) authorizer { return webTeam{a} })
}

// newACLFixtureWith is newACLFixture with team as the web team's
// authorizer and the server's extra options.
func newACLFixtureWith(t *testing.T, team func(*acl.ACL) authorizer, extra ...Option) *aclFixture {
	t.Helper()
	store := apitest.NewACLStore()
	f := &aclFixture{mgmt: acl.NewSecret(), team: acl.NewSecret()}
	for _, tok := range []*acl.Token{
		{AccessorID: "a-mgmt", SecretHash: acl.HashSecret(f.mgmt), Name: "admin", Type: acl.TypeManagement, Global: true},
		{AccessorID: "a-team", SecretHash: acl.HashSecret(f.team), Name: "web team", Type: acl.TypeClient, Policies: []string{"web-team"}},
	} {
		if _, err := store.UpsertToken(context.Background(), tok); err != nil {
			t.Fatal(err)
		}
	}
	opts := append([]Option{WithACL(apitest.ACLResolver{Reader: store}), withAuthorizer(func(a *acl.ACL, tok *acl.Token) authorizer {
		if tok != nil && slices.Contains(tok.Policies, "web-team") {
			return team(a)
		}
		return a
	})}, extra...)
	f.fixture = newFixture(t, opts...)
	return f
}

// as is an official client sending secret as its token.
func (f *aclFixture) as(t *testing.T, secret string) *consul.Client {
	t.Helper()
	u, err := url.Parse(f.url)
	if err != nil {
		t.Fatal(err)
	}
	c, err := consul.NewClient(&consul.Config{Address: u.Host, Scheme: "http", Token: secret})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantStatus(t *testing.T, what string, err error, code int, msg string) {
	t.Helper()
	var se consul.StatusError
	if !errors.As(err, &se) || se.Code != code || !strings.Contains(se.Body, msg) {
		t.Fatalf("%s: want %d %q, got %v", what, code, msg, err)
	}
}

// TestACLLeafAndRoots: a leaf needs service write on its service; the
// roots are public.
func TestACLLeafAndRoots(t *testing.T) {
	f := newACLFixture(t)
	f.registerWeb()
	f.registerProxy("db-1-sidecar-proxy", "db", 21001, true)
	_, _, err := f.as(t, "").Agent().ConnectCALeaf("web", nil)
	wantStatus(t, "leaf without token", err, 403, "Permission denied")
	_, _, err = f.as(t, acl.NewSecret()).Agent().ConnectCALeaf("web", nil)
	wantStatus(t, "leaf with an unknown token", err, 403, "ACL not found")
	if leaf, _, err := f.as(t, f.mgmt).Agent().ConnectCALeaf("db", nil); err != nil || leaf.Service != "db" {
		t.Fatalf("management leaf: %+v, %v", leaf, err)
	}
	team := f.as(t, f.team).Agent()
	if leaf, _, err := team.ConnectCALeaf("web", nil); err != nil || leaf.Service != "web" {
		t.Fatalf("team leaf of web: %+v, %v", leaf, err)
	}
	_, _, err = team.ConnectCALeaf("db", nil)
	wantStatus(t, "team leaf of db", err, 403, "Permission denied")
	// An instance ID is judged by the service it resolves to.
	_, _, err = team.ConnectCALeaf("db-1-sidecar-proxy", nil)
	wantStatus(t, "team leaf by a db proxy's ID", err, 403, "Permission denied")
	if roots, _, err := f.as(t, "").Agent().ConnectCARoots(nil); err != nil || len(roots.Roots) == 0 {
		t.Fatalf("anonymous roots: %+v, %v", roots, err)
	}
}

// TestACLTokenSources: ?token=, X-Consul-Token and Authorization: Bearer
// all carry the token; a web page's request without one is refused.
func TestACLTokenSources(t *testing.T) {
	f := newACLFixture(t)
	tests := []struct {
		name   string
		query  string
		header http.Header
		want   int
	}{
		{"query", "?token=" + f.mgmt, nil, 200},
		{"X-Consul-Token", "", http.Header{"X-Consul-Token": {f.mgmt}}, 200},
		{"bearer", "", http.Header{"Authorization": {"Bearer " + f.mgmt}}, 200},
		{"web page", "", http.Header{"Origin": {"https://evil.example"}}, 403},
		{"basic auth is no token", "", http.Header{"Authorization": {"Basic " + f.mgmt}}, 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest("GET", f.url+"/v1/agent/connect/ca/leaf/web"+tc.query, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header = tc.header
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tc.want)
			}
		})
	}
}

// TestACLFiltersAndWrites checks the team token against catalog,
// intentions, config entries and the CA configuration.
func TestACLFiltersAndWrites(t *testing.T) {
	f := newACLFixture(t)
	f.registerWeb()
	for _, dst := range []string{"web", "db"} {
		if _, err := f.ix.Upsert(intention.Intention{SourceName: "api", DestinationName: dst, Action: "allow"}, false); err != nil {
			t.Fatal(err)
		}
	}
	team := f.as(t, f.team)
	svcs, _, err := team.Catalog().Services(nil)
	if err != nil || len(svcs) != 1 || svcs["web"] == nil {
		t.Fatalf("team catalog services: %v, %v; want web only", svcs, err)
	}
	if all, _, err := f.as(t, f.mgmt).Catalog().Services(nil); err != nil || len(all) != 2 {
		t.Fatalf("management catalog services: %v, %v", all, err)
	}
	_, _, err = team.Catalog().Service("db", "", nil)
	wantStatus(t, "team catalog of db", err, 403, "Permission denied")
	ixs, _, err := team.Connect().Intentions(nil)
	if err != nil || len(ixs) != 1 || ixs[0].DestinationName != "web" {
		t.Fatalf("team intentions: %v, %v; want the one to web", ixs, err)
	}
	m, _, err := team.Connect().IntentionMatch(&consul.IntentionMatch{By: consul.IntentionMatchSource, Names: []string{"api"}}, nil)
	if err != nil || len(m["api"]) != 1 {
		t.Fatalf("team match by source: %v, %v; want the one to web", m, err)
	}
	_, err = team.Connect().IntentionUpsert(&consul.Intention{SourceName: "web", DestinationName: "db", Action: consul.IntentionActionAllow}, nil)
	wantStatus(t, "team intention to db", err, 403, "Permission denied")
	if _, err := team.Connect().IntentionUpsert(&consul.Intention{SourceName: "db", DestinationName: "web", Action: consul.IntentionActionAllow}, nil); err != nil {
		t.Fatalf("team intention to web: %v", err)
	}
	_, err = team.Connect().IntentionDeleteExact("api", "db", nil)
	wantStatus(t, "team intention delete to db", err, 403, "Permission denied")

	if ok, _, err := team.ConfigEntries().Set(&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "web", Protocol: "http"}, nil); err != nil || !ok {
		t.Fatalf("team service-defaults for web: %v, %v", ok, err)
	}
	_, _, err = team.ConfigEntries().Set(&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "db", Protocol: "http"}, nil)
	wantStatus(t, "team service-defaults for db", err, 403, "Permission denied")
	_, _, err = team.ConfigEntries().Set(&consul.ProxyConfigEntry{Kind: consul.ProxyDefaults, Name: consul.ProxyConfigGlobal}, nil)
	wantStatus(t, "team proxy-defaults", err, 403, "Permission denied")
	// Routing web's traffic to db needs service read on db (Consul's
	// discovery-chain rule), which the team does not have.
	_, _, err = team.ConfigEntries().Set(&consul.ServiceRouterConfigEntry{Kind: consul.ServiceRouter, Name: "web",
		Routes: []consul.ServiceRoute{{Match: &consul.ServiceRouteMatch{HTTP: &consul.ServiceRouteHTTPMatch{PathPrefix: "/x"}},
			Destination: &consul.ServiceRouteDestination{Service: "db"}}}}, nil)
	wantStatus(t, "team service-router from web to db", err, 403, "Permission denied")
	if ok, _, err := f.as(t, f.mgmt).ConfigEntries().Set(&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "db", Protocol: "tcp"}, nil); err != nil || !ok {
		t.Fatalf("management service-defaults for db: %v, %v", ok, err)
	}
	entries, _, err := team.ConfigEntries().List(consul.ServiceDefaults, nil)
	if err != nil || len(entries) != 1 || entries[0].GetName() != "web" {
		t.Fatalf("team service-defaults list: %v, %v; want web only", entries, err)
	}
	_, _, err = team.ConfigEntries().Get(consul.ServiceDefaults, "db", nil)
	wantStatus(t, "team read of db's service-defaults", err, 403, "Permission denied")
	_, _, err = team.Connect().CAGetConfig(nil)
	wantStatus(t, "team CA configuration", err, 403, "Permission denied")
	if _, _, err := f.as(t, f.mgmt).Connect().CAGetConfig(nil); err != nil {
		t.Fatalf("management CA configuration: %v", err)
	}
}

// TestACLTokenSelf answers the caller's token in consul/api's shape.
func TestACLTokenSelf(t *testing.T) {
	f := newACLFixture(t)
	tok, _, err := f.as(t, f.mgmt).ACL().TokenReadSelf(nil)
	if err != nil || tok.AccessorID != "a-mgmt" || tok.SecretID != f.mgmt || len(tok.Policies) != 1 || tok.Policies[0].Name != "global-management" {
		t.Fatalf("management self: %+v, %v", tok, err)
	}
	tok, _, err = f.as(t, f.team).ACL().TokenReadSelf(nil)
	if err != nil || tok.Description != "web team" || tok.Policies[0].Name != "web-team" || !tok.Local {
		t.Fatalf("team self: %+v, %v", tok, err)
	}
	_, _, err = f.as(t, "").ACL().TokenReadSelf(nil)
	wantStatus(t, "anonymous self", err, 403, "ACL not found")
}

// TestACLDisabledConsul: without WithACL nothing is enforced.
func TestACLDisabledConsul(t *testing.T) {
	f := newFixture(t)
	f.registerWeb()
	if _, _, err := f.client.Agent().ConnectCALeaf("web", nil); err != nil {
		t.Fatalf("leaf without ACLs: %v", err)
	}
	_, _, err := f.client.ACL().TokenReadSelf(nil)
	wantStatus(t, "self without ACLs", err, 401, "ACL support disabled")
}

// racingTeam is webTeam whose service write check runs a hook first: a
// catalog change that lands while the ACL check is made.
type racingTeam struct {
	webTeam
	hook func()
}

func (r racingTeam) AllowServiceWrite(name string) bool {
	if r.hook != nil {
		r.hook()
	}
	return r.webTeam.AllowServiceWrite(name)
}

// TestACLLeafIssuedForApprovedService: the leaf handler issues the leaf of
// the service the ACL check approved, even if the instance ID in the path
// resolves to another service by the time the handler runs.
func TestACLLeafIssuedForApprovedService(t *testing.T) {
	var hook func()
	f := newACLFixtureWith(t, func(a *acl.ACL) authorizer {
		return racingTeam{webTeam: webTeam{a}, hook: hook}
	})
	f.registerWeb()
	f.registerProxy("p1", "web", 21000, true)
	// While the check approves "p1" as web's proxy, p1 becomes db's.
	hook = func() { f.registerProxy("p1", "db", 21000, true) }
	leaf, _, err := f.as(t, f.team).Agent().ConnectCALeaf("p1", nil)
	if err == nil && leaf.Service != "web" {
		t.Fatalf("leaf of p1 approved as web's was issued for %q", leaf.Service)
	}
	if err != nil {
		t.Fatalf("leaf of p1: %v", err)
	}
}
