package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
	"github.com/meshlet/meshlet/structs"
)

// TestOfficialClientDrainAndEligibility drives node eligibility and drain
// with github.com/hashicorp/nomad/api: ToggleEligibility, UpdateDrain,
// UpdateDrainOpts and MonitorDrain.
func TestOfficialClientDrainAndEligibility(t *testing.T) {
	fb := apitest.NewBackend()
	if _, err := fb.RegisterJob(context.Background(), testJob("web"), api.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	srv := newTestServer(t, fb)
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	nodes := c.Nodes()
	checkNode := func(what, eligibility string, drain bool) *nomadapi.Node {
		t.Helper()
		n, _, err := nodes.Info(apitest.NodeID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n.SchedulingEligibility != eligibility || n.Drain != drain || (n.DrainStrategy != nil) != drain {
			t.Fatalf("%s: eligibility %q drain %v strategy %+v, want %q and drain %v", what, n.SchedulingEligibility,
				n.Drain, n.DrainStrategy, eligibility, drain)
		}
		stubs, _, err := nodes.List(nil)
		if err != nil || len(stubs) != 1 || stubs[0].SchedulingEligibility != eligibility || stubs[0].Drain != drain {
			t.Fatalf("%s: node list %v %+v, want eligibility %q drain %v", what, err, stubs, eligibility, drain)
		}
		return n
	}
	checkNode("new node", "eligible", false)

	el, err := nodes.ToggleEligibility(apitest.NodeID, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := checkNode("ineligible", "ineligible", false)
	if el.NodeModifyIndex != n.ModifyIndex || el.LastIndex != n.ModifyIndex || el.EvalIDs == nil {
		t.Errorf("eligibility response %+v, want the node's modify index %d and no evaluations", el, n.ModifyIndex)
	}
	if _, err := nodes.ToggleEligibility(apitest.NodeID[:8], true, nil); err != nil {
		t.Fatalf("eligibility by ID prefix: %v", err)
	}
	checkNode("eligible again", "eligible", false)

	resp, err := nodes.UpdateDrain(apitest.NodeID, &nomadapi.DrainSpec{Deadline: time.Hour}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.NodeModifyIndex == 0 || resp.LastIndex != resp.NodeModifyIndex {
		t.Errorf("drain response %+v, want the node's modify index", resp)
	}
	// The fake stops the allocations at once; the monitor, blocking from
	// the response's index, sees them stop and the drain complete.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var msgs []string
	for m := range nodes.MonitorDrain(ctx, apitest.NodeID, resp.LastIndex, false) {
		msgs = append(msgs, m.String())
	}
	got := strings.Join(msgs, "\n")
	if !strings.Contains(got, "Drain complete for node "+apitest.NodeID) || !strings.Contains(got, "have stopped") {
		t.Errorf("drain monitor said:\n%s", got)
	}
	checkNode("drained", "ineligible", false)
	for _, a := range fb.Allocations() {
		if a.DesiredStatus != structs.AllocDesiredStatusStop || a.DesiredDescription != "alloc is being migrated" {
			t.Errorf("alloc %s after the drain: %q (%q)", a.ID, a.DesiredStatus, a.DesiredDescription)
		}
	}
	if _, err := nodes.UpdateDrainOpts(apitest.NodeID, &nomadapi.DrainOptions{MarkEligible: true}, nil); err != nil {
		t.Fatal(err)
	}
	checkNode("drain cancelled, marked eligible", "eligible", false)

	// A draining node cannot be made eligible.
	fb.AddNode(&structs.Node{ID: "d0000000-0000-4000-8000-000000000009", Name: "draining", Status: "ready", Drain: true,
		SchedulingEligibility: "ineligible", DrainStrategy: &structs.DrainStrategy{}})
	_, err = nodes.ToggleEligibility("d0000000", true, nil)
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "draining") {
		t.Errorf("eligible while draining: %v, want a 400 naming the drain", err)
	}
}

func TestNodeWriteRequests(t *testing.T) {
	srv := newTestServer(t, apitest.NewBackend())
	base := srv.URL + "/v1/node/" + apitest.NodeID
	tests := []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"POST", "/eligibility", `{"NodeID":"` + apitest.NodeID + `","Eligibility":"ineligible"}`, 200, `"EvalIDs":[]`},
		{"POST", "/eligibility", `{"Eligibility":"maybe"}`, 400, `invalid scheduling eligibility "maybe"`},
		{"POST", "/eligibility", `{"NodeID":"other","Eligibility":"eligible"}`, 400, `does not match request path`},
		{"PUT", "/eligibility", `{"Eligibility":`, 400, ``},
		{"POST", "/drain", `{"DrainSpec":{"Deadline":3600000000000,"IgnoreSystemJobs":true},"MarkEligible":false}`, 200, `"NodeModifyIndex":`},
		{"POST", "/drain", `{"DrainSpec":null,"MarkEligible":true}`, 200, `"EvalIDs":[]`},
	}
	for _, tc := range tests {
		resp, body := do(t, tc.method, base+tc.path, tc.body)
		if resp.StatusCode != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s %s: %d %q, want %d containing %q", tc.method, tc.path, tc.body, resp.StatusCode, body, tc.code, tc.want)
		}
	}
	for _, path := range []string{"/eligibility", "/drain"} {
		resp, body := do(t, http.MethodPost, srv.URL+"/v1/node/ffff"+path, `{"Eligibility":"eligible"}`)
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, `"ffff"`) {
			t.Errorf("%s of an unknown node: %d %q, want 404 naming it", path, resp.StatusCode, body)
		}
	}
}
