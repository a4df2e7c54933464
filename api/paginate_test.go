package api_test

import (
	"strings"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
)

// The official client's PerPage and NextToken page through a list in ID
// order, after the filter, as Nomad's paginator does.
func TestOfficialClientPagination(t *testing.T) {
	fb := apitest.NewBackend()
	for _, id := range []string{"web", "api", "worker", "batch"} {
		if _, err := fb.RegisterJob(t.Context(), testJob(id), api.RegisterOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: newTestServer(t, fb).URL})
	if err != nil {
		t.Fatal(err)
	}
	var pages []string
	q := &nomadapi.QueryOptions{PerPage: 3}
	for range 5 {
		jobs, meta, err := c.Jobs().List(q)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
		pages = append(pages, strings.Join(ids, ","))
		if meta.NextToken == "" {
			break
		}
		q.NextToken = meta.NextToken
	}
	if got := strings.Join(pages, " | "); got != "api,batch,web | worker" {
		t.Fatalf("pages = %q, want \"api,batch,web | worker\"", got)
	}
	jobs, meta, err := c.Jobs().List(&nomadapi.QueryOptions{PerPage: 1, Filter: `ID matches "^w"`})
	if err != nil || len(jobs) != 1 || jobs[0].ID != "web" || meta.NextToken != "worker" {
		t.Fatalf("first filtered page = %v, next %q, %v; want web, then worker", jobs, meta.NextToken, err)
	}
	if _, _, err := c.Jobs().List(&nomadapi.QueryOptions{Params: map[string]string{"per_page": "-1"}}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("per_page -1 = %v, want 400", err)
	}
}
