package jobspecs

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/structs"
)

func parseJob(t *testing.T, src string) (*structs.Job, Diagnostics) {
	t.Helper()
	return Parse("t.hcl", []byte(src), nil)
}

func TestRescheduleDecodeAndDefaults(t *testing.T) {
	src := `job "j" {
  type = "%s"
  reschedule {
    delay = "10s"
  }
  group "a" {
    reschedule {
      attempts       = 2
      interval       = "2h"
      delay_function = "fibonacci"
      max_delay      = "20m"
      unlimited      = false
    }
    task "t" {
      driver = "exec"
      config { command = "x" }
    }
  }
  group "b" {
    task "t" {
      driver = "exec"
      config { command = "x" }
    }
  }
}`
	for _, typ := range []string{structs.JobTypeService, structs.JobTypeBatch} {
		job, diags := parseJob(t, strings.Replace(src, "%s", typ, 1))
		if diags.HasErrors() {
			t.Fatalf("%s: %s", typ, diags.Error())
		}
		def := DefaultReschedule(typ)
		// Group a: its own fields, then the job's delay.
		a := job.TaskGroups[0].ReschedulePolicy
		wantA := structs.ReschedulePolicy{Attempts: ptr(2), Interval: ptr(2 * time.Hour), Delay: ptr(10 * time.Second),
			DelayFunction: ptr("fibonacci"), MaxDelay: ptr(20 * time.Minute), Unlimited: ptr(false)}
		assertJSONEqual(t, a, &wantA)
		// Group b: the job's delay, then the type's defaults.
		wantB := def
		wantB.Delay = ptr(10 * time.Second)
		assertJSONEqual(t, job.TaskGroups[1].ReschedulePolicy, &wantB)
	}
	// Nomad's defaults.
	svc, batch := DefaultReschedule(structs.JobTypeService), DefaultReschedule(structs.JobTypeBatch)
	if !*svc.Unlimited || *svc.DelayFunction != "exponential" || *svc.Delay != 30*time.Second || *svc.MaxDelay != time.Hour {
		t.Errorf("service default %+v", svc)
	}
	if *batch.Unlimited || *batch.Attempts != 1 || *batch.Interval != 24*time.Hour || *batch.Delay != 5*time.Second ||
		*batch.DelayFunction != "constant" {
		t.Errorf("batch default %+v", batch)
	}
}

func TestRescheduleValidation(t *testing.T) {
	tests := []struct {
		name, typ, block string
		want             string // "" = valid
	}{
		{"disabled", "service", `attempts = 0
      unlimited = false`, ""},
		{"disabled ignores other fields", "batch", `attempts = 0
      delay = "1s"`, ""},
		{"limited", "service", `attempts = 3
      interval = "1h"
      unlimited = false`, ""},
		{"unknown delay function", "service", `delay_function = "linear"`, `delay_function "linear" is not valid`},
		{"delay too short", "service", `delay = "1s"`, "Delay 1s must be at least 5s"},
		{"max_delay below delay", "service", `delay = "1m"
      max_delay = "30s"`, "max_delay 30s must be at least delay (1m0s)"},
		{"constant ignores max_delay", "batch", `delay_function = "constant"
      max_delay = "1s"`, ""},
		{"ambiguous", "service", `attempts = 2`, "attempts = 2 and unlimited = true contradict each other"},
		{"negative attempts", "batch", `attempts = -1`, "Attempts -1 must not be negative"},
		{"interval too short", "batch", `interval = "10s"`, "Interval 10s must be at least 15s"},
		{"attempts do not fit", "batch", `attempts = 10
      interval = "1m"
      delay = "30s"`, "10 attempts with delay 30s (constant, max_delay 0s) need 5m0s"},
		{"exponential does not fit", "batch", `attempts = 5
      interval = "5m"
      delay = "30s"
      delay_function = "exponential"
      max_delay = "1h"`, "need 15m30s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := "job \"j\" {\n  type = \"" + tc.typ + "\"\n  group \"g\" {\n    reschedule {\n      " + tc.block +
				"\n    }\n    task \"t\" {\n driver = \"exec\"\n config { command = \"x\" }\n}\n  }\n}\n"
			_, diags := parseJob(t, src)
			if tc.want == "" {
				if diags.HasErrors() {
					t.Fatal(diags.Error())
				}
				return
			}
			if !strings.Contains(diags.Error(), tc.want) || !strings.HasPrefix(diags.Error(), "t.hcl:") {
				t.Fatalf("errors %q; want %q at a position", diags.Error(), tc.want)
			}
		})
	}
}

// TestRescheduleJSON: the API's JSON shape (Nomad's) reaches the same
// rules through Validate, and Canonicalize fills the defaults.
func TestRescheduleJSON(t *testing.T) {
	body := `{"ID": "j", "Type": "service", "Reschedule": {"DelayFunction": "fibonacci"},
	  "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "exec", "Config": {"command": "x"}}],
	    "ReschedulePolicy": {"Delay": 60000000000, "MaxDelay": 30000000000}}]}`
	var job structs.Job
	if err := json.Unmarshal([]byte(body), &job); err != nil {
		t.Fatal(err)
	}
	_, err := Validate(&job)
	if err == nil || !strings.Contains(err.Error(), `group "g": reschedule: Invalid max_delay; max_delay 30s must be at least delay (1m0s) with delay_function "fibonacci"`) {
		t.Fatalf("Validate: %v", err)
	}
	job.TaskGroups[0].ReschedulePolicy.MaxDelay = ptr(2 * time.Minute)
	if _, err := Validate(&job); err != nil {
		t.Fatal(err)
	}
	Canonicalize(&job)
	r := job.TaskGroups[0].ReschedulePolicy
	if *r.DelayFunction != "fibonacci" || *r.Delay != time.Minute || !*r.Unlimited || *r.MaxDelay != 2*time.Minute {
		t.Fatalf("canonical policy %+v", r)
	}
}
