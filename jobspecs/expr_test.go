package jobspecs

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/structs"
)

// parseTask parses `extra` at the top of the file and `body` inside a task
// of a minimal job (driver "test"), and returns the task. The body starts
// on line 6.
func parseTask(t *testing.T, extra, body string, opts *ParseOptions) (*structs.Task, Diagnostics) {
	t.Helper()
	src := extra + "\njob \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"test\"\n" + body + "\n    }\n  }\n}\n"
	job, diags := Parse("t.hcl", []byte(src), opts)
	// The "test" driver takes any config; drop the warning that it is
	// not built in.
	diags = slices.DeleteFunc(diags, func(d Diagnostic) bool { return strings.HasPrefix(d.Summary, `Driver "test"`) })
	if job == nil {
		return nil, diags
	}
	return job.TaskGroups[0].Tasks[0], diags
}

func TestRuntimeInterpolationKept(t *testing.T) {
	tests := []struct {
		name, expr string
		want       any
	}{
		{"quoted port", `"${NOMAD_PORT_http}"`, "${NOMAD_PORT_http}"},
		{"attr with dash", `"${attr.unique.network.ip-address}"`, "${attr.unique.network.ip-address}"},
		{"meta", `"${meta.foo}"`, "${meta.foo}"},
		{"node", `"${node.datacenter}"`, "${node.datacenter}"},
		{"upstream", `"${NOMAD_UPSTREAM_ADDR_count_api}"`, "${NOMAD_UPSTREAM_ADDR_count_api}"},
		{"in text", `"http://${NOMAD_UPSTREAM_ADDR_api}/x"`, "http://${NOMAD_UPSTREAM_ADDR_api}/x"},
		{"two refs", `"${NOMAD_IP_http}:${NOMAD_PORT_http}"`, "${NOMAD_IP_http}:${NOMAD_PORT_http}"},
		{"bare", `NOMAD_HOST_PORT_y`, "${NOMAD_HOST_PORT_y}"},
		{"bare attr", `attr.meshlet.binary`, "${attr.meshlet.binary}"},
		{"bare attr with dash", `attr.unique.network.ip-address`, "${attr.unique.network.ip-address}"},
		{"index", `"${env["HOME"]}/x"`, `${env["HOME"]}/x`},
		{"spaces normalized", `"${ NOMAD_ALLOC_ID }"`, "${NOMAD_ALLOC_ID}"},
		{"mixed with var", `"${var.v}-${NOMAD_ALLOC_INDEX}"`, "vv-${NOMAD_ALLOC_INDEX}"},
		{"function of var", `"${upper(var.v)}"`, "VV"},
		{"escaped", `"$${NOMAD_X} $HOME"`, "${NOMAD_X} $HOME"},
		{"runtime in function", `upper(NOMAD_X)`, "${upper(NOMAD_X)}"},
		{"list", `["a", NOMAD_X, "${meta.m}", 1]`, []any{"a", "${NOMAD_X}", "${meta.m}", 1}},
		{"map", `{ k = NOMAD_X, "a.b" = { c = 2.5 } }`, map[string]any{"k": "${NOMAD_X}", "a.b": map[string]any{"c": 2.5}}},
		{"heredoc", "<<EOT\nport=${NOMAD_PORT_http}\nid=${var.v}\nEOT", "port=${NOMAD_PORT_http}\nid=vv\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			task, diags := parseTask(t, `variable "v" { default = "vv" }`, "config {\n x = "+tc.expr+"\n}", nil)
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			if got := task.Config["x"]; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("x = %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestLeniency(t *testing.T) {
	job, diags := Parse("t.hcl", []byte(`
# hash comment
// slash comment
/* block
   comment */
job "my-job" {
  priority = "60"
  group "web-api" {
    count = "3"
    task "my-task" {
      driver = "exec"
      kill_timeout = "1m30s"
      leader = "true"
      env {
        "a.b" = "c"
        PORT  = 8080
        ON    = true
      }
      meta = { "x.y" = 1.5 }
      config {
        script = <<-EOT
          echo hi
            indented
          EOT
        raw = <<EOF
{"a": 1}
EOF
        command = "x"
      }
    }
    network {
      mode = "bridge"
      port "http" {
        static = "9001"
        to     = "8080"
      }
    }
    service {
      name = "web-api"
      port = 9090
      tags = [1, true, "x"]
    }
  }
}
`), nil)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	tg := job.TaskGroups[0]
	task := tg.Tasks[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"priority", job.Priority, 60},
		{"count", tg.Count, 3},
		{"labels with dashes", job.ID + "/" + tg.Name + "/" + task.Name, "my-job/web-api/my-task"},
		{"kill_timeout", task.KillTimeout.String(), "1m30s"},
		{"leader", task.Leader, true},
		{"env", task.Env, map[string]string{"a.b": "c", "PORT": "8080", "ON": "true"}},
		{"meta", task.Meta, map[string]string{"x.y": "1.5"}},
		{"indented heredoc", task.Config["script"], "echo hi\n  indented\n"},
		{"heredoc json", task.Config["raw"], "{\"a\": 1}\n"},
		{"port", tg.Networks[0].ReservedPorts, []structs.Port{{Label: "http", Value: 9001, To: 8080}}},
		{"service port", tg.Services[0].PortLabel, "9090"},
		{"tags", tg.Services[0].Tags, []string{"1", "true", "x"}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
}

func TestQuotedKeyRewriteKeepsPositions(t *testing.T) {
	// The env block is rewritten into `env = {`; the unknown argument after
	// it must still be reported at its original line and column.
	_, diags := parseTask(t, "", "      env {\n        \"a.b\" = \"c\"\n      }\n      bogus = 1", nil)
	assertDiags(t, diags, []string{`t.hcl:9:7: error: Unsupported argument; An argument named "bogus" is not expected here.`})
	task, diags := parseTask(t, "", "      env{\n        \"a.b\" = \"c\"\n      }", nil)
	if diags.HasErrors() || task.Env["a.b"] != "c" {
		t.Fatalf("env{ without space: %v %v", task, diags)
	}
}

func TestFreeformConfig(t *testing.T) {
	task, diags := parseTask(t, "", `
      config {
        command = "/bin/app"
        args    = ["-n", 3]
        ratio   = 0.25
        big     = 12345678901234
        enabled = false
        nothing = null
        mount {
          source = "a"
        }
        port "http" {
          to = 80
        }
        volume {
          path = "/x"
        }
        volume {
          path = "/y"
        }
      }`, nil)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	want := map[string]any{
		"command": "/bin/app", "args": []any{"-n", 3}, "ratio": 0.25, "big": 12345678901234,
		"enabled": false, "nothing": nil,
		"mount":  map[string]any{"source": "a"},
		"port":   map[string]any{"http": map[string]any{"to": 80}},
		"volume": []any{map[string]any{"path": "/x"}, map[string]any{"path": "/y"}},
	}
	if !reflect.DeepEqual(task.Config, want) {
		t.Errorf("config = %#v\nwant %#v", task.Config, want)
	}
}

func TestVariables(t *testing.T) {
	decl := `
variable "name" {
  type    = string
  default = "web"
}
variable "ports" {
  type    = list(number)
  default = [80]
}
variable "count" {
  type = number
}
variables {
  plain = "p"
}
locals {
  b = "${local.a}-b"
  a = upper(var.name)
}`
	body := `env {
        NAME  = var.name
        PORTS = join(",", var.ports)
        COUNT = var.count
        PLAIN = var.plain
        LOCAL = local.b
      }`
	tests := []struct {
		name    string
		vars    map[string]string
		wantEnv map[string]string
		want    []string
	}{
		{"overrides", map[string]string{"name": "api", "ports": "[1, 2]", "count": "3"},
			map[string]string{"NAME": "api", "PORTS": "1,2", "COUNT": "3", "PLAIN": "p", "LOCAL": "API-b"}, nil},
		{"number as string", map[string]string{"count": "7"},
			map[string]string{"NAME": "web", "PORTS": "80", "COUNT": "7", "PLAIN": "p", "LOCAL": "WEB-b"}, nil},
		{"missing value", nil, map[string]string{"NAME": "web", "PORTS": "80", "PLAIN": "p", "LOCAL": "WEB-b"},
			[]string{"t.hcl:10:1: error: Missing value for variable count; Set a default in the variable block or pass -var count=VALUE."}},
		{"undeclared and bad type", map[string]string{"count": "x", "nope": "1"}, nil, []string{
			`t.hcl: error: Invalid value for variable count; -var count="x" does not match the variable's type: a number is required.`,
			`t.hcl: error: Undefined variable nope; A value was given for variable "nope" with -var, but the jobspec declares no such variable.`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			task, diags := parseTask(t, decl, body, &ParseOptions{Vars: tc.vars})
			assertDiags(t, diags, tc.want)
			if tc.wantEnv != nil && !reflect.DeepEqual(task.Env, tc.wantEnv) {
				t.Errorf("env = %v, want %v", task.Env, tc.wantEnv)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name, body string
		want       string
	}{
		{"not a number", `resources { cpu = "lots" }`, `t.hcl:6:25: error: Incorrect attribute value type; Inappropriate value for attribute "cpu": a number is required.`},
		{"fraction", `resources { cpu = 1.5 }`, `t.hcl:6:25: error: Incorrect attribute value type; Inappropriate value for attribute "cpu": a whole number is required, got 1.5.`},
		{"list for string", `user = ["a"]`, `t.hcl:6:14: error: Incorrect attribute value type; Inappropriate value for attribute "user": a string is required.`},
		{"string for list", "service {\n tags = \"a\"\n}", `t.hcl:7:9: error: Incorrect attribute value type; Inappropriate value for attribute "tags": a list of strings is required.`},
		{"runtime for number", `resources { memory = NOMAD_MEM }`, `t.hcl:6:28: error: Incorrect attribute value type; Inappropriate value for attribute "memory": a number is required.`},
		{"nested env", `env = { A = { B = "c" } }`, `t.hcl:6:13: error: Incorrect attribute value type; Inappropriate value for attribute "env": element "A": a string is required.`},
		{"block in env", "env {\n        X { }\n      }", `t.hcl:7:9: error: Unexpected block in env; env takes key = value arguments only; "X" is a block.`},
		{"undefined var", `user = var.nope`, `t.hcl:6:17: error: Unsupported attribute; This object does not have an attribute named "nope".`},
		{"unknown function", `user = nofunc("x")`, `t.hcl:6:14: error: Call to unknown function; There is no function named "nofunc".`},
		{"bad bool", `leader = "maybe"`, `t.hcl:6:16: error: Incorrect attribute value type; Inappropriate value for attribute "leader": a bool is required.`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			task, diags := parseTask(t, "", "      "+tc.body, nil)
			if task == nil {
				t.Fatalf("no job built: %v", diags)
			}
			var errs []string
			for _, d := range diags.Errs() {
				errs = append(errs, d.String())
			}
			if len(errs) != 1 || errs[0] != tc.want {
				t.Errorf("errors:\n got %s\nwant %s", strings.Join(errs, "\n     "), tc.want)
			}
		})
	}
}
