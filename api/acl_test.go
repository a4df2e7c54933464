package api_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
	"github.com/meshlet/meshlet/structs"
)

// aclFixture is an ACL-enabled server over the fake backend and an
// in-memory ACL store.
type aclFixture struct {
	srv   *httptest.Server
	fb    *apitest.Backend
	store *apitest.ACLStore
}

func newACLFixture(t *testing.T, opts ...api.ServerOption) *aclFixture {
	t.Helper()
	f := &aclFixture{fb: apitest.NewBackend(), store: apitest.NewACLStore()}
	opts = append([]api.ServerOption{api.WithACL(apitest.ACLResolver{Reader: f.store}, f.store)}, opts...)
	f.srv = newTestServer(t, f.fb, opts...)
	return f
}

// client is an official client sending secret as X-Nomad-Token.
func (f *aclFixture) client(t *testing.T, secret string) *nomadapi.Client {
	t.Helper()
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: f.srv.URL, SecretID: secret})
	if err != nil {
		t.Fatalf("failed to create nomad client: %v", err)
	}
	return c
}

// bootstrap makes the management token and returns its secret.
func (f *aclFixture) bootstrap(t *testing.T) string {
	t.Helper()
	tok, _, err := f.client(t, "").ACLTokens().Bootstrap(nil)
	if err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}
	return tok.SecretID
}

// clientToken creates a client token holding policies and returns it.
func (f *aclFixture) clientToken(t *testing.T, mgmt string, policies ...string) *nomadapi.ACLToken {
	t.Helper()
	tok, _, err := f.client(t, mgmt).ACLTokens().Create(&nomadapi.ACLToken{Name: "worker", Type: "client", Policies: policies}, nil)
	if err != nil {
		t.Fatalf("Create token: %v", err)
	}
	return tok
}

func wantErr(t *testing.T, what string, err error, code int, msg string) {
	t.Helper()
	var re nomadapi.UnexpectedResponseError
	if err == nil {
		t.Fatalf("%s: want %d %q, got success", what, code, msg)
	}
	if !errors.As(err, &re) || re.StatusCode() != code || !strings.Contains(re.Body(), msg) {
		t.Fatalf("%s: want %d %q, got %v", what, code, msg, err)
	}
}

func TestACLBootstrapOnce(t *testing.T) {
	f := newACLFixture(t)
	anon := f.client(t, "")
	tok, wm, err := anon.ACLTokens().Bootstrap(nil)
	if err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}
	if tok.SecretID == "" || tok.AccessorID == "" || tok.Type != acl.TypeManagement || tok.Name != "Bootstrap Token" || wm.LastIndex == 0 {
		t.Fatalf("Bootstrap answered %+v (index %d)", tok, wm.LastIndex)
	}
	_, _, err = anon.ACLTokens().Bootstrap(nil)
	wantErr(t, "second Bootstrap", err, http.StatusBadRequest, acl.ErrBootstrapDone.Error())

	self, qm, err := f.client(t, tok.SecretID).ACLTokens().Self(nil)
	if err != nil {
		t.Fatalf("Self: %v", err)
	}
	if self.AccessorID != tok.AccessorID || self.SecretID != tok.SecretID || qm.LastIndex == 0 {
		t.Fatalf("Self answered %+v (index %d), want accessor %s with its secret", self, qm.LastIndex, tok.AccessorID)
	}
	stored, err := f.store.Token(context.Background(), tok.AccessorID)
	if err != nil || stored.SecretID != "" || stored.SecretHash != acl.HashSecret(tok.SecretID) {
		t.Fatalf("stored bootstrap token %+v, %v: want the secret's hash only", stored, err)
	}
}

func TestACLPolicies(t *testing.T) {
	f := newACLFixture(t)
	mgmtSecret := f.bootstrap(t)
	policies := f.client(t, mgmtSecret).ACLPolicies()
	rules := `namespace "default" { policy = "read" }`
	if _, err := policies.Upsert(&nomadapi.ACLPolicy{Name: "readonly", Description: "reads", Rules: rules}, nil); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	list, qm, err := policies.List(nil)
	if err != nil || len(list) != 1 || list[0].Name != "readonly" || qm.LastIndex == 0 {
		t.Fatalf("List: %+v (index %d), %v", list, qm.LastIndex, err)
	}
	p, _, err := policies.Info("readonly", nil)
	if err != nil || p.Rules != rules || p.Description != "reads" {
		t.Fatalf("Info: %+v, %v", p, err)
	}
	_, err = policies.Upsert(&nomadapi.ACLPolicy{Name: "bad name!", Rules: rules}, nil)
	wantErr(t, "Upsert of an invalid name", err, http.StatusBadRequest, "invalid policy name")

	// A client token reads its own policies, not others, and writes none.
	tok := f.clientToken(t, mgmtSecret, "readonly")
	worker := f.client(t, tok.SecretID).ACLPolicies()
	if own, _, err := worker.Info("readonly", nil); err != nil || own.Name != "readonly" {
		t.Fatalf("client Info of its own policy: %+v, %v", own, err)
	}
	if self, _, err := worker.Self(nil); err != nil || len(self) != 1 || self[0].Name != "readonly" {
		t.Fatalf("client policy Self: %+v, %v", self, err)
	}
	_, err = worker.Upsert(&nomadapi.ACLPolicy{Name: "mine", Rules: rules}, nil)
	wantErr(t, "client Upsert", err, http.StatusForbidden, "Permission denied")
	_, err = f.client(t, "").ACLPolicies().Delete("readonly", nil)
	wantErr(t, "anonymous Delete", err, http.StatusForbidden, "Permission denied")

	if _, err := policies.Delete("readonly", nil); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, _, err = policies.Info("readonly", nil)
	wantErr(t, "Info after Delete", err, http.StatusNotFound, "not found")
}

func TestACLTokens(t *testing.T) {
	f := newACLFixture(t)
	mgmtSecret := f.bootstrap(t)
	tokens := f.client(t, mgmtSecret).ACLTokens()

	tok := f.clientToken(t, mgmtSecret, "readonly")
	if tok.AccessorID == "" || tok.SecretID == "" || tok.Type != "client" || !slices.Equal(tok.Policies, []string{"readonly"}) {
		t.Fatalf("Create answered %+v", tok)
	}
	list, _, err := tokens.List(nil)
	if err != nil || len(list) != 2 {
		t.Fatalf("List: %d tokens, %v; want the bootstrap token and the new one", len(list), err)
	}
	info, _, err := tokens.Info(tok.AccessorID, nil)
	if err != nil || info.Name != "worker" || info.SecretID != "" {
		t.Fatalf("Info: %+v, %v; want the token without its secret", info, err)
	}
	self, _, err := f.client(t, tok.SecretID).ACLTokens().Self(nil)
	if err != nil || self.AccessorID != tok.AccessorID || self.SecretID != tok.SecretID {
		t.Fatalf("Self: %+v, %v", self, err)
	}
	_, _, err = f.client(t, tok.SecretID).ACLTokens().List(nil)
	wantErr(t, "client List", err, http.StatusForbidden, "Permission denied")
	_, _, err = tokens.Create(&nomadapi.ACLToken{Name: "empty", Type: "client"}, nil)
	wantErr(t, "Create without policies", err, http.StatusBadRequest, "client token missing policies")

	info.Name = "renamed"
	if upd, _, err := tokens.Update(info, nil); err != nil || upd.Name != "renamed" {
		t.Fatalf("Update: %+v, %v", upd, err)
	}
	if _, err := tokens.Delete(tok.AccessorID, nil); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, _, err = tokens.Info(tok.AccessorID, nil)
	wantErr(t, "Info after Delete", err, http.StatusNotFound, "not found")
	_, _, err = f.client(t, tok.SecretID).ACLTokens().Self(nil)
	wantErr(t, "Self of a deleted token", err, http.StatusForbidden, "ACL token not found")
	_, _, err = f.client(t, "").ACLTokens().Self(nil)
	wantErr(t, "anonymous Self", err, http.StatusForbidden, "ACL token not found")
}

// TestACLEnforcement checks who may reach which route, by the header
// that carries the token.
func TestACLEnforcement(t *testing.T) {
	f := newACLFixture(t)
	mgmt := f.bootstrap(t)
	worker := f.clientToken(t, mgmt, "readonly").SecretID
	job := registerBody(t, testJob("enforced"))
	tests := []struct {
		name, method, path, body string
		header                   http.Header
		wantStatus               int
		wantBody                 string
	}{
		{"job list without token", "GET", "/v1/jobs", "", nil, 403, "Permission denied"},
		{"job register without token", "PUT", "/v1/jobs", job, nil, 403, "Permission denied"},
		{"job list, management", "GET", "/v1/jobs", "", hdr("X-Nomad-Token", mgmt), 200, "[]"},
		{"job list, bearer", "GET", "/v1/jobs", "", hdr("Authorization", "Bearer "+mgmt), 200, "[]"},
		{"job list, client token", "GET", "/v1/jobs", "", hdr("X-Nomad-Token", worker), 403, "Permission denied"},
		{"job register, client token", "PUT", "/v1/jobs", job, hdr("X-Nomad-Token", worker), 403, "Permission denied"},
		{"unknown secret", "GET", "/v1/jobs", "", hdr("X-Nomad-Token", acl.NewSecret()), 403, "ACL token not found"},
		{"web page", "GET", "/v1/nodes", "", hdr("Origin", "https://evil.example"), 403, "Permission denied"},
		{"web page register", "POST", "/v1/jobs", job, hdr("Origin", "https://evil.example"), 403, "Permission denied"},
		{"node drain, client token", "PUT", "/v1/node/x/drain", "{}", hdr("X-Nomad-Token", worker), 403, "Permission denied"},
		{"agent self without token", "GET", "/v1/agent/self", "", nil, 403, "Permission denied"},
		{"snapshot, client token", "GET", "/v1/operator/snapshot", "", hdr("X-Nomad-Token", worker), 403, "Permission denied"},
		{"health is open", "GET", "/v1/agent/health", "", nil, 200, "ok"},
		{"leader is open", "GET", "/v1/status/leader", "", nil, 200, "4647"},
		{"unknown route", "GET", "/v1/nope", "", nil, 404, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := doHeader(t, tc.method, f.srv.URL+tc.path, tc.body, tc.header)
			if resp.StatusCode != tc.wantStatus || !strings.Contains(body, tc.wantBody) {
				t.Fatalf("%s %s: %d %q, want %d containing %q", tc.method, tc.path, resp.StatusCode, body, tc.wantStatus, tc.wantBody)
			}
		})
	}
	if n := len(f.fb.Allocations()); n != 0 {
		t.Fatalf("%d allocations after refused registrations", n)
	}
}

// TestACLOfficialClientManagement runs the official-client conformance
// check with the management token: every route it uses lets it through.
func TestACLOfficialClientManagement(t *testing.T) {
	f := newACLFixture(t)
	f.fb.AppendTaskLog(apitest.OfficialClientTask, "stdout", apitest.OfficialClientMarker+"\n")
	secret := f.bootstrap(t)
	apitest.ExerciseOfficialClientConfig(t, &nomadapi.Config{Address: f.srv.URL, SecretID: secret})
	_, _, err := f.client(t, "").Jobs().List(nil)
	wantErr(t, "anonymous List", err, http.StatusForbidden, "Permission denied")
}

// TestACLDisabled: without WithACL nothing is enforced and the ACL
// endpoints answer Nomad's "ACL support disabled".
func TestACLDisabled(t *testing.T) {
	srv := newTestServer(t, apitest.NewBackend())
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.ACLTokens().Bootstrap(nil)
	wantErr(t, "Bootstrap", err, http.StatusBadRequest, "ACL support disabled")
	_, _, err = c.ACLPolicies().List(nil)
	wantErr(t, "policy List", err, http.StatusBadRequest, "ACL support disabled")
	if _, _, err := c.Jobs().List(nil); err != nil {
		t.Fatalf("job List without ACLs: %v", err)
	}
}

// A server that enforces tokens without keeping the ACL state (a
// client-only agent: its servers hold it) refuses requests without a
// valid token and answers the /v1/acl routes that they are served
// elsewhere.
func TestACLEnforcedWithoutStore(t *testing.T) {
	store := apitest.NewACLStore()
	srv := newTestServer(t, apitest.NewBackend(), api.WithACL(apitest.ACLResolver{Reader: store}, nil))
	anon, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = anon.Jobs().List(nil)
	wantErr(t, "job List without a token", err, http.StatusForbidden, "Permission denied")
	_, _, err = anon.ACLTokens().Bootstrap(nil)
	wantErr(t, "Bootstrap", err, http.StatusBadRequest, "ACL tokens and policies are served by the servers")
}

func hdr(k, v string) http.Header { return http.Header{k: {v}} }

func doHeader(t *testing.T, method, url, body string, h http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatalf("failed to build request: %v", err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("failed to read body: %v", err)
	}
	return resp, string(raw)
}

// submitter grants what a "submitter" policy would: jobs in the default
// namespace, and service write on the names in services only.
type submitter struct {
	*acl.ACL
	services []string
}

func (s submitter) AllowNamespaceOperation(ns, capability string) bool {
	return ns == "default" && (capability == acl.NamespaceCapabilitySubmitJob || capability == acl.NamespaceCapabilityListJobs)
}

func (s submitter) AllowServiceWrite(name string) bool { return slices.Contains(s.services, name) }

// TestACLJobServiceWrite: a job may register a service only if its
// submitter's token has service write on it (group, task and connect
// services alike).
func TestACLJobServiceWrite(t *testing.T) {
	f := newACLFixture(t, api.WithAuthorizer(func(a *acl.ACL, tok *acl.Token) api.Authorizer {
		if tok != nil && slices.Contains(tok.Policies, "submitter") {
			return submitter{ACL: a, services: []string{"count-dashboard"}}
		}
		return a
	}))
	secret := f.clientToken(t, f.bootstrap(t), "submitter").SecretID
	withGroupService := func(id string, svc *structs.Service) *structs.Job {
		j := testJob(id)
		j.TaskGroups[0].Services = []*structs.Service{svc}
		return j
	}
	taskJob := testJob("task-svc")
	taskJob.TaskGroups[0].Tasks[0].Services = []*structs.Service{{Name: "count-api"}}
	tests := []struct {
		name       string
		job        *structs.Job
		wantStatus int
		wantBody   string
	}{
		{"allowed service", withGroupService("dash", &structs.Service{Name: "count-dashboard"}), 200, "EvalID"},
		{"group service", withGroupService("api", &structs.Service{Name: "count-api"}), 403,
			`Permission denied: job registers service "count-api" without service write permission`},
		{"task service", taskJob, 403, `service "count-api"`},
		{"connect sidecar", withGroupService("mesh", &structs.Service{Name: "count-api", PortLabel: "9001",
			Connect: &structs.ConsulConnect{SidecarService: &structs.ConsulSidecarService{}}}), 403, `service "count-api"`},
		{"other namespace", func() *structs.Job { j := testJob("ns"); j.Namespace = "prod"; return j }(), 400, `nonexistent namespace "prod"`},
		{"ingress gateway without mesh write", withGroupService("gw", &structs.Service{Name: "count-dashboard", PortLabel: "8080",
			Connect: &structs.ConsulConnect{Gateway: &structs.ConsulGateway{Ingress: &structs.ConsulIngressConfigEntry{
				Listeners: []*structs.ConsulIngressListener{{Port: 8080, Services: []*structs.ConsulIngressService{{Name: "x"}}}}}}}}), 403,
			`job writes the ingress-gateway config entry "count-dashboard" without mesh write permission`},
		{"terminating gateway without mesh write", withGroupService("tgw", &structs.Service{Name: "count-dashboard",
			Connect: &structs.ConsulConnect{Gateway: &structs.ConsulGateway{Terminating: &structs.ConsulTerminatingConfigEntry{
				Services: []*structs.ConsulLinkedService{{Name: "legacy"}}}}}}), 403,
			`job writes the terminating-gateway config entry "count-dashboard" without mesh write permission`},
		{"mesh gateway: service write is enough", func() *structs.Job {
			j := withGroupService("mgw", &structs.Service{Name: "count-dashboard",
				Connect: &structs.ConsulConnect{Gateway: &structs.ConsulGateway{Mesh: &structs.ConsulMeshConfigEntry{}}}})
			j.TaskGroups[0].Networks = []*structs.NetworkResource{{Mode: structs.NetworkModeBridge}}
			return j
		}(), 200, "EvalID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := doHeader(t, "PUT", f.srv.URL+"/v1/jobs", registerBody(t, tc.job), hdr("X-Nomad-Token", secret))
			if resp.StatusCode != tc.wantStatus || !strings.Contains(body, tc.wantBody) {
				t.Fatalf("register %s: %d %q, want %d containing %q", tc.job.ID, resp.StatusCode, body, tc.wantStatus, tc.wantBody)
			}
		})
	}
	jobs, _, err := f.client(t, secret).Jobs().List(nil)
	if err != nil || len(jobs) != 2 || jobs[0].ID != "dash" || jobs[1].ID != "mgw" {
		t.Fatalf("jobs after the refusals: %v, %v; want dash and mgw", jobs, err)
	}
}

// execer grants alloc-exec in the default namespace, and alloc-node-exec
// when node is set.
type execer struct {
	*acl.ACL
	node bool
}

func (e execer) AllowNamespaceOperation(ns, capability string) bool {
	return ns == "default" && (capability == acl.NamespaceCapabilityAllocExec ||
		(e.node && capability == acl.NamespaceCapabilityAllocNodeExec))
}

// TestACLExecNodeExec: exec into a raw_exec task (a shell on the node)
// needs alloc-node-exec on top of alloc-exec.
func TestACLExecNodeExec(t *testing.T) {
	f := newACLFixture(t, api.WithAuthorizer(func(a *acl.ACL, tok *acl.Token) api.Authorizer {
		switch {
		case tok == nil:
			return a
		case slices.Contains(tok.Policies, "exec"):
			return execer{ACL: a}
		case slices.Contains(tok.Policies, "node-exec"):
			return execer{ACL: a, node: true}
		}
		return a
	}))
	mgmt := f.bootstrap(t)
	if _, err := f.fb.RegisterJob(context.Background(), testJob("shell"), api.RegisterOptions{}); err != nil {
		t.Fatalf("failed to seed job: %v", err)
	}
	path := "/v1/client/allocation/" + f.fb.Allocations()[0].ID + `/exec?task=app&command=["/bin/true"]`
	for _, tc := range []struct {
		policy     string
		wantStatus int
		wantBody   string
	}{
		{"exec", 403, "needs alloc-node-exec"},
		{"readonly", 403, "Permission denied"},
		// Past the checks, a plain GET is refused by the websocket upgrade.
		{"node-exec", 400, ""},
	} {
		secret := f.clientToken(t, mgmt, tc.policy).SecretID
		resp, body := doHeader(t, "GET", f.srv.URL+path, "", hdr("X-Nomad-Token", secret))
		if resp.StatusCode != tc.wantStatus || !strings.Contains(body, tc.wantBody) {
			t.Fatalf("exec with %s: %d %q, want %d containing %q", tc.policy, resp.StatusCode, body, tc.wantStatus, tc.wantBody)
		}
	}
}
