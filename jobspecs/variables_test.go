package jobspecs

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"
)

func TestParseVariables(t *testing.T) {
	got, err := ParseVariables("v.hcl", []byte("count = 3\ncmd = \"/bin/echo\"\nports = [1, 2]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]cty.Value{"count": cty.NumberIntVal(3), "cmd": cty.StringVal("/bin/echo"),
		"ports": cty.TupleVal([]cty.Value{cty.NumberIntVal(1), cty.NumberIntVal(2)})}
	if !maps.EqualFunc(got, want, cty.Value.RawEquals) {
		t.Fatalf("got %#v, want %#v", got, want)
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
			{Name: "one.hcl", Vars: map[string]cty.Value{"a": cty.StringVal("file1"), "b": cty.StringVal("file1")}},
			{Name: "two.json", Vars: map[string]cty.Value{"b": cty.StringVal("file2"), "undeclared": cty.StringVal("x")}},
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

// Values keep their types as in Nomad: a var file's value has the type it
// is written as unless the variable declares one; a variable without a
// type takes its default's; -var and environment strings are read as the
// variable's type.
func TestVariableTypes(t *testing.T) {
	const decls = `
variable "typed" { type = number }
variable "untyped" {}
variable "num" { default = 3 }
variable "flag" { default = false }
variable "str" { default = "x" }
variable "pair" { default = [1, 2] }
variables {
  n2 = 10
}
`
	const job = `
job "j" {
  meta {
    typed   = jsonencode(var.typed)
    untyped = jsonencode(var.untyped)
    num     = jsonencode(var.num)
    flag    = jsonencode(var.flag)
    str     = jsonencode(var.str)
    pair    = jsonencode(var.pair)
    n2      = jsonencode(var.n2)
    sum     = var.num + var.n2
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}
`
	fileVars := func(src string) []VarFile {
		vars, err := ParseVariables("v.hcl", []byte(src), nil)
		if err != nil {
			t.Fatal(err)
		}
		return []VarFile{{Name: "v.hcl", Vars: vars}}
	}
	tests := []struct {
		name string
		opts *ParseOptions
		want map[string]string
		err  string
	}{
		{"var file", &ParseOptions{FileVars: fileVars(`typed = "7"
untyped = [1, 2, 3]
num = "5"
pair = [1, 2, 3]
`)}, map[string]string{"typed": "7", "untyped": "[1,2,3]", "num": "5", "pair": "[1,2,3]", "sum": "15"}, ""},
		{"-var and environment", &ParseOptions{Vars: map[string]string{"typed": "7", "untyped": "5", "num": "5", "str": "5"},
			EnvVars: map[string]string{"flag": "true", "n2": "20", "pair": "[3]"}},
			map[string]string{"typed": "7", "untyped": `"5"`, "num": "5", "flag": "true", "str": `"5"`, "n2": "20", "pair": "[3]", "sum": "25"}, ""},
		{"-var not of the default's type", &ParseOptions{Vars: map[string]string{"typed": "1", "untyped": "", "num": "five"}}, nil,
			`Invalid value for variable num; -var num="five" does not match the variable's type: a number is required.`},
		{"var file value not of the default's type", &ParseOptions{Vars: map[string]string{"typed": "1", "untyped": ""},
			FileVars: fileVars("str = [1]\n")}, nil,
			`v.hcl: error: Invalid value for variable str; The value in v.hcl does not match the variable's type: string required, but have tuple.`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, diags := Parse("j.hcl", []byte(decls+job), tc.opts)
			if tc.err != "" {
				if !strings.Contains(diags.Error(), tc.err) {
					t.Fatalf("diagnostics %q lack %q", diags.Error(), tc.err)
				}
				return
			}
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			for k, v := range tc.want {
				if got.Meta[k] != v {
					t.Errorf("meta %s = %s, want %s", k, got.Meta[k], v)
				}
			}
		})
	}
}
