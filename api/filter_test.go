package api_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
)

// The official client's QueryOptions.Filter selects list entries, as
// Nomad's go-bexpr filter does; a bad expression is a 400.
func TestOfficialClientFilter(t *testing.T) {
	fb := apitest.NewBackend()
	for _, id := range []string{"web", "api", "worker"} {
		j := testJob(id)
		if id == "web" {
			j.Meta = map[string]string{"owner": "team-a"}
		}
		if _, err := fb.RegisterJob(t.Context(), j, api.RegisterOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: newTestServer(t, fb).URL})
	if err != nil {
		t.Fatal(err)
	}
	jobs, _, err := c.Jobs().List(&nomadapi.QueryOptions{Filter: `ID matches "^w"`})
	if err != nil || len(jobs) != 2 || jobs[0].ID == "api" || jobs[1].ID == "api" {
		t.Fatalf("jobs matching ^w = %v, %v; want web and worker", jobs, err)
	}
	// A field the JSON omits when empty is still there to filter on.
	noMeta, _, err := c.Jobs().List(&nomadapi.QueryOptions{Filter: `Meta is empty`})
	if err != nil || len(noMeta) != 2 || noMeta[0].ID == "web" || noMeta[1].ID == "web" {
		t.Fatalf("jobs without meta = %v, %v; want api and worker", noMeta, err)
	}
	allocs, _, err := c.Allocations().List(&nomadapi.QueryOptions{Filter: `JobID == "api"`})
	if err != nil || len(allocs) == 0 {
		t.Fatalf("allocations of api = %v, %v", allocs, err)
	}
	for _, a := range allocs {
		if a.JobID != "api" {
			t.Fatalf("allocation %s of job %s passed the filter", a.ID, a.JobID)
		}
	}
	if _, _, err := c.Jobs().List(&nomadapi.QueryOptions{Filter: `ID ==`}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("a bad filter = %v, want 400", err)
	}
}

// ACL lists filter too; an endpoint whose answer is not a list refuses a
// filter instead of answering unfiltered.
func TestFilterACLListsAndRefusals(t *testing.T) {
	f := newACLFixture(t)
	mgmt := f.bootstrap(t)
	c := f.client(t, mgmt)
	for _, name := range []string{"ci-temp", "ops"} {
		if _, _, err := c.ACLTokens().Create(&nomadapi.ACLToken{Name: name, Type: "management"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	toks, _, err := c.ACLTokens().List(&nomadapi.QueryOptions{Filter: `Name == "ci-temp"`})
	if err != nil || len(toks) != 1 || toks[0].Name != "ci-temp" {
		t.Fatalf("tokens named ci-temp = %v, %v", toks, err)
	}
	for _, path := range []string{"/v1/agent/self", "/v1/acl/token/self"} {
		resp, body := doHeader(t, "GET", f.srv.URL+path+"?filter="+url.QueryEscape(`Name == "x"`), "", hdr("X-Nomad-Token", mgmt))
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET %s with a filter = %d %q, want 400", path, resp.StatusCode, strings.TrimSpace(body))
		}
	}
}
