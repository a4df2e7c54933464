package jobspecs

import (
	"slices"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/structs"
)

// validJob is a job that passes validation; tests break one thing in it.
func validJob() *structs.Job {
	return &structs.Job{ID: "web", Name: "web", TaskGroups: []*structs.TaskGroup{{
		Name: "api", Count: 1,
		Networks: []*structs.NetworkResource{{Mode: "bridge",
			ReservedPorts: []structs.Port{{Label: "http", Value: 8080}}}},
		Services: []*structs.Service{{Name: "api", PortLabel: "http"}},
		Tasks: []*structs.Task{{Name: "server", Driver: "raw_exec",
			Config: map[string]any{"command": "/bin/sleep", "args": []any{"10", 1, true}}}},
	}}}
}

func TestValidateNamesAndConfig(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(j *structs.Job)
		want   string // "" = valid
	}{
		{"valid", func(*structs.Job) {}, ""},
		{"bidi override in job ID", func(j *structs.Job) { j.ID = "web\u202egnp.exe" },
			`Invalid job id; Job ID "web\u202egnp.exe" contains the control or bidirectional formatting character U+202E`},
		{"escape sequence in job name", func(j *structs.Job) { j.Name = "web\x1b[2J" },
			`Job name "web\x1b[2J" contains the control or bidirectional formatting character U+001B`},
		{"C1 control in group name", func(j *structs.Job) { j.TaskGroups[0].Name = "api\u0085" }, `character U+0085`},
		{"isolate in task name", func(j *structs.Job) { j.TaskGroups[0].Tasks[0].Name = "srv\u2066" }, `character U+2066`},
		{"newline in service name", func(j *structs.Job) { j.TaskGroups[0].Services[0].Name = "api\nx" }, `character U+000A`},
		{"invalid UTF-8", func(j *structs.Job) { j.ID = "web\xff" }, `is not valid UTF-8`},
		{"long job ID", func(j *structs.Job) { j.ID = strings.Repeat("a", 40<<10) }, "Job ID is 40960 bytes long; the limit is 128 bytes"},
		{"128 bytes is fine", func(j *structs.Job) { j.ID = strings.Repeat("a", 128) }, ""},
		{"default service name of long names", func(j *structs.Job) {
			j.ID, j.TaskGroups[0].Name, j.TaskGroups[0].Services[0].Name = strings.Repeat("a", 128), strings.Repeat("b", 128), ""
			Canonicalize(j)
		}, ""},
		{"long group name", func(j *structs.Job) { j.TaskGroups[0].Name = strings.Repeat("b", 129) }, "Group name is 129 bytes long"},
		{"task name with slash", func(j *structs.Job) { j.TaskGroups[0].Tasks[0].Name = "../etc" },
			`Task name "../etc" names a directory in the allocation`},
		{"task name dot dot", func(j *structs.Job) { j.TaskGroups[0].Tasks[0].Name = ".." }, `names a directory`},
		{"cni name with slash", func(j *structs.Job) { j.TaskGroups[0].Networks[0].Mode = "cni/../../etc/x" },
			`Invalid CNI network name; Network mode "cni/../../etc/x"`},
		{"cni name ok", func(j *structs.Job) { j.TaskGroups[0].Networks[0].Mode = "cni/my-net_1.2" }, ""},
		{"static port 0", func(j *structs.Job) { j.TaskGroups[0].Networks[0].ReservedPorts[0].Value = 0 },
			`Port "http": static = 0 is not a port`},
		{"missing command", func(j *structs.Job) { delete(j.TaskGroups[0].Tasks[0].Config, "command") },
			`Missing driver config command; Task "server": the raw_exec driver needs config { command = "..." }`},
		{"no config", func(j *structs.Job) { j.TaskGroups[0].Tasks[0].Config = nil }, `Missing driver config command`},
		{"command not a string", func(j *structs.Job) { j.TaskGroups[0].Tasks[0].Config["command"] = []any{"/bin/sh"} },
			`config command must be a string, not a list`},
		{"empty command", func(j *structs.Job) { j.TaskGroups[0].Tasks[0].Config["command"] = "" }, `config command must not be empty`},
		{"args not a list", func(j *structs.Job) { j.TaskGroups[0].Tasks[0].Config["args"] = "-c x" }, `config args must be a list, not a string`},
		{"args element a map", func(j *structs.Job) { j.TaskGroups[0].Tasks[0].Config["args"] = []any{"a", map[string]any{}} },
			`config args[1] must be a string, number or bool, not a map`},
		{"plugin driver config is not checked", func(j *structs.Job) {
			j.TaskGroups[0].Tasks[0].Driver = "podman"
			j.TaskGroups[0].Tasks[0].Config = map[string]any{"image": "x"}
		}, ""},
		{"count over the limit", func(j *structs.Job) { j.TaskGroups[0].Count = 20_000_000 }, "Count 20000000 is over the limit of 10000"},
		{"counts add up over the limit", func(j *structs.Job) {
			g := *j.TaskGroups[0]
			g.Name = "api2"
			j.TaskGroups[0].Count, g.Count = 6000, 6000
			j.TaskGroups = append(j.TaskGroups, &g)
		}, "The groups' counts add up to more than 10000 allocations"},
		{"job too large", func(j *structs.Job) { j.Meta = map[string]string{"big": strings.Repeat("x", 5<<20)} },
			"Job too large; The job is 52432"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := validJob()
			tc.break_(j)
			_, err := Validate(j)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v; want %q", err, tc.want)
			}
			// The message is safe to print: no raw control characters.
			if err != nil && strings.ContainsFunc(strings.ReplaceAll(err.Error(), "\n", ""), unsafeRune) {
				t.Fatalf("error contains raw control characters: %q", err.Error())
			}
		})
	}
}

func TestValidateOptions(t *testing.T) {
	j := validJob()
	j.TaskGroups[0].Count = 20
	if _, err := ValidateWith(j, &ValidateOptions{MaxCount: 10}); err == nil || !strings.Contains(err.Error(), "Count 20 is over the limit of 10") {
		t.Fatalf("err = %v", err)
	}
	if _, err := ValidateWith(j, &ValidateOptions{MaxJobBytes: 100}); err == nil || !strings.Contains(err.Error(), "the limit is 100 bytes") {
		t.Fatalf("err = %v", err)
	}
	src := "job \"j\" {\n  group \"g\" {\n    count = 11\n    task \"t\" {\n      driver = \"exec\"\n      config { command = \"x\" }\n    }\n  }\n}\n"
	_, diags := Parse("t.hcl", []byte(src), &ParseOptions{Validate: &ValidateOptions{MaxCount: 10}})
	if diags.Error() != "t.hcl:3:13: error: Invalid count; Count 11 is over the limit of 10." {
		t.Fatalf("diags: %s", diags.Error())
	}
}

func TestParseNameRules(t *testing.T) {
	src := `job "a\u202eb" {
  group "g" {
    network {
      mode = "cni/x y"
      port "p" { static = 0 }
    }
    task "a/b" {
      driver = "raw_exec"
      config {
        args   = "x"
        work_dir = "/"
        bogus  = 1
      }
    }
  }
}
`
	_, diags := Parse("t.hcl", []byte(src), nil)
	var got []string
	for _, d := range diags {
		got = append(got, d.String())
	}
	want := []string{
		`t.hcl:1:5: error: Invalid job id; Job ID "a\u202eb" contains the control or bidirectional formatting character U+202E; names may not contain them.`,
		`t.hcl:4:14: error: Invalid CNI network name; Network mode "cni/x y": a CNI network name has letters, digits, '_', '.' and '-' only, starts with a letter or digit and is at most 128 bytes.`,
		`t.hcl:5:27: error: Invalid port; Port "p": static = 0 is not a port; omit static for a dynamic port.`,
		`t.hcl:7:5: error: Invalid task name; Task name "a/b" names a directory in the allocation: it may not contain '/' or '\' or be "." or "..".`,
	}
	if len(got) < len(want) || strings.Join(got[:len(want)], "\n") != strings.Join(want, "\n") {
		t.Fatalf("diagnostics:\n%s\nwant first:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	rest := strings.Join(got[len(want):], "\n")
	for _, w := range []string{"Missing driver config command", "config args must be a list", `config work_dir is not supported by meshlet's raw_exec driver; ignored`, `Unknown raw_exec config key "bogus"; ignored`} {
		if !strings.Contains(rest, w) {
			t.Errorf("missing %q in\n%s", w, rest)
		}
	}
}

// A negative bound is no bound; Unbounded leaves count and size to the
// server (whose job_max_count may be above the default).
func TestValidateOptionsUnbounded(t *testing.T) {
	j := validJob()
	j.TaskGroups[0].Count = DefaultMaxCount + 1
	if _, err := ValidateWith(j, nil); err == nil {
		t.Fatal("count over the default accepted by default")
	}
	for _, o := range []*ValidateOptions{{MaxCount: -1}, Unbounded()} {
		if _, err := ValidateWith(j, o); err != nil {
			t.Fatalf("%+v: %v", *o, err)
		}
	}
	if _, err := ValidateWith(j, &ValidateOptions{MaxJobBytes: -1, MaxCount: 10}); err == nil || !strings.Contains(err.Error(), "over the limit of 10") {
		t.Fatalf("MaxCount 10 with unbounded size: %v", err)
	}
}

// A connect service's name may use job-level values: Nomad substitutes
// NOMAD_JOB_NAME, NOMAD_META_* and the like before it checks the name.
func TestConnectNameInterpolation(t *testing.T) {
	jobspec := func(job, name string) string {
		return `job "` + job + `" {
  meta {
    team = "pay"
  }
  group "web" {
    network {
      mode = "bridge"
    }
    service {
      name = "` + name + `"
      port = "8080"
      connect {
        sidecar_service {}
      }
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
`
	}
	upperGroup := strings.Replace(jobspec("shop", "api"), `group "web"`, `group "Web"`, 1)
	if _, diags := Parse("j.hcl", []byte(upperGroup), nil); !strings.Contains(diags.Error(), `Consul Connect group "Web" with sidecar may not contain uppercase letters`) {
		t.Errorf("an uppercase group with a sidecar: %v, want Nomad's error", diags)
	}
	for _, c := range []struct{ job, name, want, err string }{
		{"shop", "${NOMAD_JOB_NAME}-rails", "shop-rails", ""},
		{"shop", "${NOMAD_META_team}-${NOMAD_GROUP_NAME}-${NOMAD_NAMESPACE}", "pay-web-default", ""},
		{"Shop", "${NOMAD_JOB_NAME}-rails", "", `Consul Connect service name "Shop-rails" must not contain uppercase characters`},
		{"shop", "api-${NOMAD_ALLOC_INDEX}", "", `Service name "api-${NOMAD_ALLOC_INDEX}" must be valid per RFC 1123`},
	} {
		job, diags := Parse("j.hcl", []byte(jobspec(c.job, c.name)), nil)
		if c.err != "" {
			if !diags.HasErrors() || !strings.Contains(diags.Error(), c.err) {
				t.Errorf("%s in job %s: %v, want an error with %q", c.name, c.job, diags, c.err)
			}
			continue
		}
		if diags.HasErrors() || job.TaskGroups[0].Services[0].Name != c.want {
			t.Errorf("%s in job %s: %v %v, want the name %q", c.name, c.job, diags, job, c.want)
		}
	}
}

// ServiceNames are the names that register: defaults filled, connect
// names interpolated, the job untouched.
func TestServiceNames(t *testing.T) {
	job := &structs.Job{ID: "shop", TaskGroups: []*structs.TaskGroup{{Name: "web",
		Services: []*structs.Service{{}, {Name: "${NOMAD_JOB_NAME}-rails", Connect: &structs.ConsulConnect{}}, {Name: "${NOMAD_JOB_NAME}-plain"}},
		Tasks:    []*structs.Task{{Name: "t", Services: []*structs.Service{{}}}}}}}
	got := ServiceNames(job)
	want := []string{"${NOMAD_JOB_NAME}-plain", "shop-rails", "shop-web", "shop-web-t"}
	if !slices.Equal(got, want) {
		t.Errorf("ServiceNames = %v, want %v", got, want)
	}
	if job.TaskGroups[0].Services[1].Name != "${NOMAD_JOB_NAME}-rails" || job.TaskGroups[0].Services[0].Name != "" {
		t.Errorf("ServiceNames changed the job: %+v", job.TaskGroups[0].Services)
	}
}
