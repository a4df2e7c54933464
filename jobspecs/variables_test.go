package jobspecs

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

func TestParseVariables(t *testing.T) {
	got, err := ParseVariables("v.hcl", []byte("count = 3\ncmd = \"/bin/echo\"\nports = [1, 2]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"count": "3", "cmd": "/bin/echo", "ports": "[1, 2]"}; !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got, err := ParseVariables("v.hcl", []byte("  \n"), nil); got != nil || err != nil {
		t.Fatalf("empty: %v %v", got, err)
	}
	list := "[" + strings.Repeat("1,", 20_000) + "1]"
	tests := []struct{ src, want string }{
		{"count = \n", "invalid Variables: v.hcl:1:9: error: Invalid expression"},
		{"count = var.x\n", `variable "count" must be a constant`},
		{"count = upper(\"x\")\n", `variable "count" must be a constant`},
		// Two nested loops of 20,001: 400 million iterations.
		{"x = [for a in " + list + " : [for b in " + list + " : b]]\n", "Evaluating the jobspec costs more than"},
		{"x = " + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + "\n", "nest more than 128 levels"},
		{"x = 1e99999\n", "out of range"},
	}
	for _, tc := range tests {
		_, err := ParseVariables("v.hcl", []byte(tc.src), nil)
		if !errors.Is(err, ErrInvalidVariables) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.40q: err = %v; want %q", tc.src, err, tc.want)
		}
	}
}

// Values for variables come in Nomad's precedence: -var over -var-file
// (a later file over an earlier one) over NOMAD_VAR_ over the default;
// an undeclared name is an error from -var, a warning from a file, and
// ignored from the environment.
func TestVariablePrecedence(t *testing.T) {
	const src = `
variable "a" {
  default = "default"
}
variable "b" {
  default = "default"
}
variable "c" {
  default = "default"
}
variable "d" {
  default = "default"
}
job "j" {
  meta {
    a = var.a
    b = var.b
    c = var.c
    d = var.d
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
`
	opts := &ParseOptions{
		EnvVars: map[string]string{"a": "env", "b": "env", "c": "env", "nope": "ignored"},
		FileVars: []VarFile{
			{Name: "one.hcl", Vars: map[string]string{"a": "file1", "b": "file1"}},
			{Name: "two.json", Vars: map[string]string{"b": "file2", "undeclared": "x"}},
		},
		Vars: map[string]string{"a": "cli"},
	}
	job, diags := Parse("j.hcl", []byte(src), opts)
	if diags.HasErrors() || job == nil {
		t.Fatalf("parse: %v", diags)
	}
	want := map[string]string{"a": "cli", "b": "file2", "c": "env", "d": "default"}
	for k, v := range want {
		if job.Meta[k] != v {
			t.Errorf("var.%s = %q, want %q (meta %v)", k, job.Meta[k], v, job.Meta)
		}
	}
	if w := diags.Warnings(); len(w) != 1 || !strings.Contains(w[0].String(), "two.json: warning: Value for undeclared variable undeclared") {
		t.Errorf("warnings = %v, want one naming two.json's undeclared variable", w)
	}
	opts.Vars = map[string]string{"nope": "x"}
	if _, diags := Parse("j.hcl", []byte(src), opts); !diags.HasErrors() || !strings.Contains(diags.Error(), "Undefined variable nope") {
		t.Errorf("undeclared -var: %v, want an error", diags)
	}
}
