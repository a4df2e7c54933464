package jobspecs

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/structs"
)

func durPtr(d time.Duration) *time.Duration { return &d }

// parseChecks parses testdata/valid/checks.hcl and returns its group
// service "web" and task service "web-admin".
func parseChecks(t *testing.T) (*structs.Job, *structs.Service, *structs.Service) {
	t.Helper()
	job, diags := ParseFile("testdata/valid/checks.hcl", nil)
	if diags.HasErrors() || job == nil {
		t.Fatalf("parse: %v", diags)
	}
	tg := job.TaskGroups[0]
	if len(tg.Services) != 1 || len(tg.Tasks) != 1 || len(tg.Tasks[0].Services) != 1 {
		t.Fatalf("unexpected shape: %d group services, %d tasks", len(tg.Services), len(tg.Tasks))
	}
	return job, tg.Services[0], tg.Tasks[0].Services[0]
}

// TestParseCheckFields decodes every check field of checks.hcl and compares
// each one, by name, with what the jobspec says.
func TestParseCheckFields(t *testing.T) {
	_, web, admin := parseChecks(t)
	inherited := &structs.CheckRestart{Limit: 5, Grace: durPtr(time.Minute)}
	tests := []struct {
		name string
		got  []structs.ServiceCheck
		i    int
		want structs.ServiceCheck
	}{
		{"http", web.Checks, 0, structs.ServiceCheck{
			Name: "web-http", Type: "http", PortLabel: "http", Path: "/health?full=1", Protocol: "https",
			Method: "POST", Body: `{"probe":true}`, AddressMode: "alloc",
			Interval: 10 * time.Second, Timeout: 2 * time.Second,
			TLSSkipVerify: true, TLSServerName: "web.internal",
			InitialStatus: "warning", OnUpdate: "ignore_warnings", Notes: "answers 200 when the database is reachable",
			SuccessBeforePassing: 2, FailuresBeforeCritical: 3, FailuresBeforeWarning: 1,
			Header: map[string][]string{
				"Authorization": {"Bearer ${NOMAD_ALLOC_ID}"},
				"X-Probe":       {"meshlet", "checks"},
			},
			CheckRestart: &structs.CheckRestart{Limit: 3, Grace: durPtr(30 * time.Second), IgnoreWarnings: true},
		}},
		{"grpc", web.Checks, 1, structs.ServiceCheck{
			Name: "web-grpc", Type: "grpc", PortLabel: "grpc", GRPCService: "web.v1.Health", GRPCUseTLS: true,
			Expose: true, Interval: 15 * time.Second, Timeout: 3 * time.Second, OnUpdate: "require_healthy",
			CheckRestart: inherited,
		}},
		{"script", web.Checks, 2, structs.ServiceCheck{
			Name: "web-script", Type: "script", TaskName: "web", Command: "/bin/sh",
			Args: []string{"-c", "test -f /tmp/ready"}, Interval: 30 * time.Second, Timeout: 5 * time.Second,
			CheckRestart: inherited,
		}},
		{"tcp", admin.Checks, 0, structs.ServiceCheck{
			Type: "tcp", Interval: 5 * time.Second, Timeout: time.Second,
			InitialStatus: "passing", OnUpdate: "ignore", Header: map[string][]string{},
		}},
		{"http header argument", admin.Checks, 1, structs.ServiceCheck{
			Type: "http", Path: "/ready", Interval: 5 * time.Second, Timeout: time.Second,
			Header: map[string][]string{"Content-Type": {"application/json"}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.i >= len(tc.got) {
				t.Fatalf("only %d checks", len(tc.got))
			}
			got, want := reflect.ValueOf(tc.got[tc.i]), reflect.ValueOf(tc.want)
			for f := range want.NumField() {
				name := want.Type().Field(f).Name
				if g, w := got.Field(f).Interface(), want.Field(f).Interface(); !reflect.DeepEqual(g, w) {
					t.Errorf("%s = %s, want %s", name, show(g), show(w))
				}
			}
		})
	}
	// The inherited check_restart is a copy per check, not shared.
	if web.Checks[1].CheckRestart == web.Checks[2].CheckRestart {
		t.Error("checks share one CheckRestart")
	}
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestCheckFieldsCovered fails when a ServiceCheck field is added without
// checks.hcl setting it (so TestParseCheckFields would not see it).
func TestCheckFieldsCovered(t *testing.T) {
	_, web, admin := parseChecks(t)
	all := append(append([]structs.ServiceCheck{}, web.Checks...), admin.Checks...)
	typ := reflect.TypeFor[structs.ServiceCheck]()
	for f := range typ.NumField() {
		set := false
		for _, c := range all {
			set = set || !reflect.ValueOf(c).Field(f).IsZero()
		}
		if !set {
			t.Errorf("no check in testdata/valid/checks.hcl sets %s", typ.Field(f).Name)
		}
	}
}

// TestCheckJSONMatchesNomadAPI: the job's JSON, as /v1/jobs/parse and
// /v1/job return it, decodes into nomad/api's ServiceCheck with every
// field, and that decodes back to the same checks.
func TestCheckJSONMatchesNomadAPI(t *testing.T) {
	job, web, admin := parseChecks(t)
	apiType := reflect.TypeFor[nomadapi.ServiceCheck]()
	for f := range reflect.TypeFor[structs.ServiceCheck]().NumField() {
		sf := reflect.TypeFor[structs.ServiceCheck]().Field(f)
		jsonName, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		af, ok := apiType.FieldByName(jsonName)
		if !ok {
			t.Errorf("nomad/api ServiceCheck has no field %s (JSON name of %s)", jsonName, sf.Name)
			continue
		}
		if sf.Type.Kind() != reflect.Pointer && af.Type != sf.Type {
			t.Errorf("%s: meshlet type %s, nomad/api type %s", sf.Name, sf.Type, af.Type)
		}
	}
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	var aj nomadapi.Job
	if err := json.Unmarshal(b, &aj); err != nil {
		t.Fatalf("nomad/api cannot decode the job: %v", err)
	}
	ag := aj.TaskGroups[0]
	for _, pair := range []struct {
		ours   []structs.ServiceCheck
		theirs []nomadapi.ServiceCheck
	}{{web.Checks, ag.Services[0].Checks}, {admin.Checks, ag.Tasks[0].Services[0].Checks}} {
		if len(pair.theirs) != len(pair.ours) {
			t.Fatalf("nomad/api sees %d checks, want %d", len(pair.theirs), len(pair.ours))
		}
		for i, ac := range pair.theirs {
			ab, _ := json.Marshal(ac)
			var back structs.ServiceCheck
			if err := json.Unmarshal(ab, &back); err != nil {
				t.Fatal(err)
			}
			want := pair.ours[i]
			if len(want.Header) == 0 {
				want.Header = nil // omitempty
			}
			if !reflect.DeepEqual(back, want) {
				t.Errorf("check %d through nomad/api:\n got %s\nwant %s", i, show(back), show(want))
			}
		}
	}
	if c := ag.Services[0].Checks[0]; c.Header["X-Probe"][1] != "checks" || c.GRPCService != "" ||
		c.SuccessBeforePassing != 2 || c.CheckRestart == nil || *c.CheckRestart.Grace != 30*time.Second {
		t.Errorf("nomad/api http check = %+v", c)
	}
}

// TestCheckRestartMerge: a service's check_restart merges into each
// check's own field by field, as Nomad's CheckRestart.Merge (the check's
// limit if above 0, its grace if set, its ignore_warnings if true), and an
// unset grace is Nomad's 1s. A finding on an inherited field points at the
// service's block.
func TestCheckRestartMerge(t *testing.T) {
	src := `job "j" {
  group "g" {
    network {
      port "http" {}
    }
    service {
      name = "web"
      port = "http"
      check_restart {
        limit = 3
        grace = "90s"
      }
      check {
        type     = "tcp"
        interval = "10s"
        timeout  = "2s"
        check_restart {
          ignore_warnings = true
        }
      }
      check {
        type     = "tcp"
        interval = "10s"
        timeout  = "2s"
        check_restart {
          limit = 7
        }
      }
      check {
        type     = "tcp"
        interval = "10s"
        timeout  = "2s"
      }
    }
    task "t" {
      driver = "exec"
      config { command = "x" }
      service {
        name = "admin"
        port = "http"
        check {
          type     = "tcp"
          interval = "10s"
          timeout  = "2s"
          check_restart { limit = 2 }
        }
      }
    }
  }
}`
	job, diags := Parse("cr.hcl", []byte(src), nil)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	tg := job.TaskGroups[0]
	web := tg.Services[0].Checks
	for i, want := range []*structs.CheckRestart{
		{Limit: 3, Grace: durPtr(90 * time.Second), IgnoreWarnings: true},
		{Limit: 7, Grace: durPtr(90 * time.Second)},
		{Limit: 3, Grace: durPtr(90 * time.Second)},
	} {
		if got := web[i].CheckRestart; !reflect.DeepEqual(got, want) {
			t.Errorf("check %d: check_restart = %s, want %s", i, show(got), show(want))
		}
	}
	if web[0].CheckRestart == web[2].CheckRestart {
		t.Error("checks share one CheckRestart")
	}
	want := &structs.CheckRestart{Limit: 2, Grace: durPtr(time.Second)}
	if got := tg.Tasks[0].Services[0].Checks[0].CheckRestart; !reflect.DeepEqual(got, want) {
		t.Errorf("task check: check_restart = %s, want %s (Nomad's grace default)", show(got), show(want))
	}

	bad := strings.Replace(src, "limit = 3", "limit = -1", 1)
	_, diags = Parse("cr.hcl", []byte(bad), nil)
	var lines []string
	for _, d := range diags {
		lines = append(lines, d.String())
	}
	wantErr := "cr.hcl:10:17: error: Invalid check_restart limit; check_restart limit -1 must not be negative (0 never restarts)."
	if !slices.Contains(lines, wantErr) {
		t.Errorf("diagnostics:\n%s\nwant %s", strings.Join(lines, "\n"), wantErr)
	}
}

// TestCheckRulesWithoutHCL: jobs from JSON get the same check rules, with
// paths instead of positions.
func TestCheckRulesWithoutHCL(t *testing.T) {
	job := &structs.Job{ID: "j", Name: "j", TaskGroups: []*structs.TaskGroup{{
		Name:  "g",
		Tasks: []*structs.Task{{Name: "t", Driver: "exec", Config: map[string]any{"command": "x"}}},
		Services: []*structs.Service{{Name: "s", Checks: []structs.ServiceCheck{{
			Name: "c", Type: "tcp", Interval: time.Second, Timeout: time.Second,
			GRPCService: "x", InitialStatus: "up", TaskName: "t",
			CheckRestart: &structs.CheckRestart{Limit: -1},
		}}}},
	}}}
	_, err := Validate(job)
	if !errors.Is(err, ErrInvalidJob) {
		t.Fatalf("err = %v", err)
	}
	want := []string{
		`group "g": service "s": check "c": Invalid check field; grpc_service works with grpc checks only, not "tcp".`,
		`group "g": service "s": check "c": Invalid initial_status; initial_status "up" is not valid; use "passing", "warning" or "critical".`,
		`group "g": service "s": check "c": check_restart: Invalid check_restart limit; check_restart limit -1 must not be negative (0 never restarts).`,
		`group "g": service "s": check "c": Invalid check task; task works with script and grpc checks only, not "tcp".`,
	}
	got := strings.Split(err.Error(), "\n")[1:]
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n got %q\nwant %q", got, want)
	}
	job.TaskGroups[0].Services[0].Checks[0] = structs.ServiceCheck{Type: "tcp", Interval: time.Second, Timeout: time.Second}
	if _, err := Validate(job); err != nil {
		t.Errorf("valid check rejected: %v", err)
	}
}

// TestGroupScriptCheckTask: a group service's script check runs in a task,
// its own or the service's (Nomad's rule and message).
func TestGroupScriptCheckTask(t *testing.T) {
	script := structs.ServiceCheck{Name: "ready", Type: "script", Command: "/bin/true", Interval: time.Second, Timeout: time.Second}
	job := &structs.Job{ID: "j", Name: "j", TaskGroups: []*structs.TaskGroup{{
		Name:     "g",
		Tasks:    []*structs.Task{{Name: "t", Driver: "exec", Config: map[string]any{"command": "x"}}},
		Services: []*structs.Service{{Name: "s", Checks: []structs.ServiceCheck{script}}},
	}}}
	_, err := Validate(job)
	if want := `group "g": service "s": check "ready": Missing check task; Service [g]->s or Check ready must specify task parameter`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want %q", err, want)
	}
	job.TaskGroups[0].Services[0].TaskName = "t"
	if _, err := Validate(job); err != nil {
		t.Errorf("the service's task rejected: %v", err)
	}
	job.TaskGroups[0].Services[0].TaskName = ""
	job.TaskGroups[0].Services[0].Checks[0].TaskName = "t"
	if _, err := Validate(job); err != nil {
		t.Errorf("the check's task rejected: %v", err)
	}
}

// A JSON job (the official client's api.Service) carries a service-level
// CheckRestart: Canonicalize merges it into each check's as the HCL path
// does, instead of dropping it.
func TestCheckRestartMergeJSON(t *testing.T) {
	grace := 90 * time.Second
	api := &nomadapi.Job{ID: ptr("j"), Name: ptr("j"), TaskGroups: []*nomadapi.TaskGroup{{Name: ptr("g"),
		Services: []*nomadapi.Service{{Name: "web", CheckRestart: &nomadapi.CheckRestart{Limit: 3, Grace: &grace},
			Checks: []nomadapi.ServiceCheck{
				{Type: "tcp", Interval: 10 * time.Second, Timeout: 2 * time.Second, CheckRestart: &nomadapi.CheckRestart{IgnoreWarnings: true}},
				{Type: "tcp", Interval: 10 * time.Second, Timeout: 2 * time.Second},
			}}},
		Tasks: []*nomadapi.Task{{Name: "t", Driver: "raw_exec", Config: map[string]any{"command": "/bin/true"}}}}}}
	b, err := json.Marshal(api)
	if err != nil {
		t.Fatal(err)
	}
	var job structs.Job
	if err := json.Unmarshal(b, &job); err != nil {
		t.Fatal(err)
	}
	Canonicalize(&job)
	s := job.TaskGroups[0].Services[0]
	want := []structs.CheckRestart{{Limit: 3, Grace: &grace, IgnoreWarnings: true}, {Limit: 3, Grace: &grace}}
	for i, c := range s.Checks {
		if cr := c.CheckRestart; cr == nil || cr.Limit != want[i].Limit || cr.Grace == nil || *cr.Grace != grace || cr.IgnoreWarnings != want[i].IgnoreWarnings {
			t.Errorf("check %d check_restart = %+v, want %+v", i, cr, want[i])
		}
	}
	if s.CheckRestart != nil {
		t.Errorf("the service-level block stays after merging: %+v", s.CheckRestart)
	}
}

// TestVersionConstraintsWithoutHCL: the servers refuse an invalid version
// or semver constraint value at submit, as Nomad does.
func TestVersionConstraintsWithoutHCL(t *testing.T) {
	job := &structs.Job{ID: "j", Name: "j",
		Constraints: []*structs.Constraint{{LTarget: "${attr.kernel.version}", Operand: "semver", RTarget: "~> 1.2"}},
		TaskGroups: []*structs.TaskGroup{{
			Name:  "g",
			Tasks: []*structs.Task{{Name: "t", Driver: "exec", Config: map[string]any{"command": "x"}}},
		}}}
	_, err := Validate(job)
	if want := `constraint[0]: Invalid constraint value; Operator "semver" needs a valid value`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want %q", err, want)
	}
	job.Constraints[0].RTarget = ">= 1.2.0"
	if _, err := Validate(job); err != nil {
		t.Errorf("a valid semver constraint rejected: %v", err)
	}
}
