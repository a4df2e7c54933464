package jobspecs

import (
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/structs"
)

// tmplTask wraps template blocks in a task; the first template line is
// line 5 of the file.
func tmplTask(blocks string) string {
	return "task \"t\" {\n  driver = \"exec\"\n" + blocks + "\n  config { command = \"x\" }\n}"
}

func TestTemplateDecode(t *testing.T) {
	src := "job \"j\" {\n  group \"g\" {\n" + tmplTask(`  template {
    data = "a={{ env \"X\" }}"
    destination = "local/a.env"
    change_mode = "signal"
    change_signal = "SIGHUP"
    splay = "3s"
    perms = "600"
    uid = 1000
    gid = 1001
    left_delimiter = "[["
    right_delimiter = "]]"
    error_on_missing_key = true
    wait {
      min = "1s"
      max = "4s"
    }
  }
  template {
    source = "local/in.tpl"
    destination = "${NOMAD_SECRETS_DIR}/b"
    env = true
  }`) + "\n  }\n}\n"
	job, diags := Parse("t.hcl", []byte(src), nil)
	if diags.HasErrors() || len(diags) != 0 {
		t.Fatalf("diagnostics: %v", diags)
	}
	ts := job.TaskGroups[0].Tasks[0].Templates
	if len(ts) != 2 {
		t.Fatalf("templates: %d", len(ts))
	}
	a := ts[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"data", *a.EmbeddedTmpl, `a={{ env "X" }}`},
		{"destination", *a.DestPath, "local/a.env"},
		{"change_mode", *a.ChangeMode, "signal"},
		{"change_signal", *a.ChangeSignal, "SIGHUP"},
		{"splay", *a.Splay, 3 * time.Second},
		{"perms", *a.Perms, "600"},
		{"uid", *a.Uid, 1000},
		{"gid", *a.Gid, 1001},
		{"left", *a.LeftDelim, "[["},
		{"right", *a.RightDelim, "]]"},
		{"missing key", *a.ErrMissingKey, true},
		{"wait min", *a.Wait.Min, time.Second},
		{"wait max", *a.Wait.Max, 4 * time.Second},
		{"source", *ts[1].SourcePath, "local/in.tpl"},
		{"dest 2", *ts[1].DestPath, "${NOMAD_SECRETS_DIR}/b"},
		{"env", *ts[1].Envvars, true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestTemplateRules(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string
	}{
		{"ok", `  template {
    data = "x"
    destination = "../alloc/x"
  }`, nil},
		{"missing destination and data", `  template {
    change_mode = "noop"
  }`, []string{
			`t.hcl:5:3: error: Missing template source; A template needs data (an inline template) or source (a template file in the task directory).`,
			`t.hcl:5:3: error: Missing template destination; A template needs a destination, e.g. destination = "local/config.txt".`,
		}},
		{"destination escapes", `  template {
    data = "x"
    destination = "../../etc/passwd"
  }`, []string{
			`t.hcl:7:19: error: Template destination escapes the allocation directory; destination "../../etc/passwd" must be a path inside the task directory or the shared alloc directory (e.g. "local/x", "${NOMAD_ALLOC_DIR}/x").`,
		}},
		{"source escapes", `  template {
    source = "../alloc/x.tpl"
    destination = "local/x"
  }`, []string{
			`t.hcl:6:14: error: Template source escapes the task directory; source "../alloc/x.tpl" must be a path inside the task directory.`,
		}},
		{"signal without signal", `  template {
    data = "x"
    destination = "local/x"
    change_mode = "signal"
  }`, []string{
			"t.hcl:8:19: error: Missing change_signal; change_mode \"signal\" needs a change_signal, e.g. change_signal = \"SIGHUP\".",
		}},
		{"script", `  template {
    data = "x"
    destination = "local/x"
    change_mode = "script"
    change_script {
      command = "/bin/true"
    }
  }`, []string{
			"t.hcl:8:19: error: Unsupported change_mode; change_mode \"script\" is not supported by meshlet; use \"restart\", \"signal\" or \"noop\".",
		}},
		{"bad values", `  template {
    data = "x"
    destination = "local/x"
    change_mode = "reload"
    change_signal = "SIGFOO"
    perms = "0x1"
    splay = "-1s"
    uid = -3
    wait {
      min = "5s"
      max = "1s"
    }
  }`, []string{
			"t.hcl:8:19: error: Invalid change_mode; change_mode \"reload\" is not valid; use \"restart\", \"signal\" or \"noop\".",
			"t.hcl:9:21: error: Invalid change_signal; change_signal \"SIGFOO\" is not a signal name such as \"SIGHUP\" or \"SIGUSR1\".",
			"t.hcl:10:13: error: Invalid perms; perms \"0x1\" is not an octal file mode such as \"644\".",
			"t.hcl:11:13: error: Invalid splay; splay -1s must not be negative.",
			"t.hcl:12:11: error: Invalid uid; uid -3 must be -1 (unset) or a user/group ID.",
			"t.hcl:14:13: error: Invalid wait; wait min 5s is greater than max 1s.",
		}},
		{"signal on env", `  template {
    data = "x"
    destination = "local/x"
    env = true
    change_mode = "signal"
    change_signal = "SIGHUP"
  }`, []string{
			"t.hcl:9:19: error: Signal on an env template; A template with env = true cannot use change_mode \"signal\": the environment of a running process cannot change; use \"restart\".",
		}},
		{"unknown attribute", `  template {
    data = "x"
    destination = "local/x"
    vault_grace = "5s"
    change_sgnal = "SIGHUP"
  }`, []string{
			"t.hcl:8:5: warning: vault_grace is not supported by meshlet yet; ignored",
			"t.hcl:9:5: error: Unsupported argument; An argument named \"change_sgnal\" is not expected here. Did you mean \"change_signal\"?",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assertDiags(t, parseGroup(t, tmplTask(tc.body)), tc.want)
		})
	}
}

func TestTemplateValidateJSON(t *testing.T) {
	s := func(v string) *string { return &v }
	job := &structs.Job{ID: "j", Name: "j", TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 1,
		Tasks: []*structs.Task{{Name: "t", Driver: "exec", Templates: []*structs.Template{
			{EmbeddedTmpl: s("x"), DestPath: s("/../../x")},
			{EmbeddedTmpl: s("x"), DestPath: s("local/x"), ChangeMode: s("signal")},
		}}}}}}
	_, err := Validate(job)
	if err == nil {
		t.Fatal("no error")
	}
	want := `group "g": task "t": template[1]: Missing change_signal; change_mode "signal" needs a change_signal, e.g. change_signal = "SIGHUP".`
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not contain %q", err, want)
	}
}
