package api_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/api"
)

// nsOnly allows every namespace operation in ns and nothing elsewhere
// (the test resolver gives client tokens no rights of their own).
type nsOnly struct {
	*acl.ACL
	ns string
}

func (a nsOnly) AllowNamespaceOperation(ns, _ string) bool { return ns == a.ns }

// meshlet has one namespace: a job of another namespace is refused, and a
// request naming another namespace is refused before any ACL rule, so a
// token with rights only in "prod" cannot read or stop "default"'s jobs
// by asking for ?namespace=prod, and no job can hide in a namespace a
// "default"-only token is not checked against.
func TestOneNamespace(t *testing.T) {
	f := newACLFixture(t, api.WithAuthorizer(func(a *acl.ACL, tok *acl.Token) api.Authorizer {
		for _, ns := range []string{"prod", "default"} {
			if tok != nil && slices.Contains(tok.Policies, ns) {
				return nsOnly{a, ns}
			}
		}
		return a
	}))
	mgmt := f.bootstrap(t)
	admin := f.client(t, mgmt)
	if _, err := admin.ACLPolicies().Upsert(&nomadapi.ACLPolicy{Name: "prod",
		Rules: `namespace "prod" { policy = "write" }`}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ACLPolicies().Upsert(&nomadapi.ACLPolicy{Name: "default",
		Rules: `namespace "default" { policy = "write" }`}, nil); err != nil {
		t.Fatal(err)
	}

	prodJob := testJob("payroll")
	prodJob.Namespace = "prod"
	resp, body := doHeader(t, "PUT", f.srv.URL+"/v1/jobs", registerBody(t, prodJob), hdr("X-Nomad-Token", mgmt))
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `nonexistent namespace "prod"`) {
		t.Fatalf("register in namespace prod = %d %q, want 400 nonexistent namespace", resp.StatusCode, body)
	}
	if jobs, _, err := admin.Jobs().List(nil); err != nil || len(jobs) != 0 {
		t.Fatalf("jobs after the refused register = %v, %v; want none", jobs, err)
	}

	resp, body = doHeader(t, "PUT", f.srv.URL+"/v1/jobs", registerBody(t, testJob("web")), hdr("X-Nomad-Token", mgmt))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("register in default = %d %s", resp.StatusCode, body)
	}
	prod := f.clientToken(t, mgmt, "prod").SecretID
	for _, req := range []struct{ method, path string }{
		{"GET", "/v1/job/web?namespace=prod"},
		{"GET", "/v1/jobs?namespace=prod"},
		{"DELETE", "/v1/job/web?namespace=prod"},
		{"GET", "/v1/job/web/allocations?namespace=prod"},
	} {
		resp, body := doHeader(t, req.method, f.srv.URL+req.path, "", hdr("X-Nomad-Token", prod))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "nonexistent namespace") {
			t.Errorf("%s %s with a prod token = %d %q, want 400 nonexistent namespace", req.method, req.path, resp.StatusCode, strings.TrimSpace(body))
		}
	}
	if _, _, err := f.client(t, prod).Jobs().Info("web", nil); err == nil {
		t.Error("a token with rights only in prod read a job of default")
	}
	if job, _, err := admin.Jobs().Info("web", nil); err != nil || *job.Status == "dead" {
		t.Fatalf("web after the refused requests: %v", err)
	}

	// The official client's own namespaces: "default" and "*" work.
	dev := f.client(t, f.clientToken(t, mgmt, "default").SecretID)
	for _, ns := range []string{"default", "*"} {
		jobs, _, err := dev.Jobs().List(&nomadapi.QueryOptions{Namespace: ns})
		if err != nil || len(jobs) != 1 {
			t.Errorf("Jobs().List(namespace=%s) = %d jobs, %v; want web", ns, len(jobs), err)
		}
	}
}
