package api_test

import (
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
)

// `nomad eval status <id>` looks the evaluation up with
// Evaluations().PrefixList first, and `nomad eval list` lists them: GET
// /v1/evaluations answers the evaluations of every job with
// ?prefix=, ?filter_job_id= and ?filter_eval_status=, on a backend that
// records evaluations and on one that does not.
func TestEvaluationListOfficialClient(t *testing.T) {
	for name, b := range map[string]api.Backend{
		"recorded": apitest.NewBackend(),
		"memo":     struct{ api.Backend }{apitest.NewBackend()},
	} {
		t.Run(name, func(t *testing.T) {
			srv := newTestServer(t, b)
			c, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			byJob := map[string]string{}
			for _, id := range []string{"web", "db"} {
				job := nomadapi.NewServiceJob(id, id, "global", 50)
				job.AddTaskGroup(nomadapi.NewTaskGroup("g", 1).AddTask(nomadapi.NewTask("t", "raw_exec").SetConfig("command", "/bin/true")))
				resp, _, err := c.Jobs().Register(job, nil)
				if err != nil {
					t.Fatalf("register %s: %v", id, err)
				}
				byJob[id] = resp.EvalID
			}
			all, qm, err := c.Evaluations().List(nil)
			if err != nil || len(all) != 2 || qm.LastIndex == 0 {
				t.Fatalf("List = %d evaluations, %+v, %v; want 2 and an index", len(all), qm, err)
			}
			got, _, err := c.Evaluations().PrefixList(byJob["web"][:8])
			if err != nil || len(got) != 1 || got[0].ID != byJob["web"] || got[0].JobID != "web" {
				t.Fatalf("PrefixList = %+v, %v; want web's evaluation", got, err)
			}
			q := &nomadapi.QueryOptions{Params: map[string]string{"filter_job_id": "db", "filter_eval_status": "complete"}}
			got, _, err = c.Evaluations().List(q)
			if err != nil || len(got) != 1 || got[0].ID != byJob["db"] {
				t.Fatalf("List(job db) = %+v, %v; want db's evaluation", got, err)
			}
			q = &nomadapi.QueryOptions{Params: map[string]string{"filter_eval_status": "blocked"}}
			if got, _, err = c.Evaluations().List(q); err != nil || len(got) != 0 {
				t.Fatalf("List(blocked) = %+v, %v; want none", got, err)
			}
		})
	}
}
