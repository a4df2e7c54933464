package jobspecs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// allocGuard is a generous bound on what a rejected expression may
// allocate: the unbounded versions ask for gigabytes to terabytes.
const allocGuard = 256 << 20

// parseAllocs parses src and returns its diagnostics and the bytes
// allocated meanwhile.
func parseAllocs(t *testing.T, src string, opts *ParseOptions) (Diagnostics, uint64) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, diags := Parse("t.hcl", []byte(src), opts)
	runtime.ReadMemStats(&after)
	return diags, after.TotalAlloc - before.TotalAlloc
}

// TestExpressionLimits runs the probes that made the agent run out of
// memory (and variants) inside a task's config, on line 6 of the file.
func TestExpressionLimits(t *testing.T) {
	const mb = `format("%01000000d", 0)` // a 1,000,000-byte string: within the limit
	tests := []struct {
		name, locals, expr string
		want               string // in the error's detail
	}{
		{"issue probe", "", `join(` + mb + `, split("0", ` + mb + `))`, "split would produce 1000001 elements"},
		{"join of a long list", "", `join(` + mb + `, split("", format("%050000d", 0)))`, "join would produce a string of"},
		{"format width", "", `format("%0999999999d", 0)`, "format would produce a string"},
		{"format string width", "", `format("%999999999s", "")`, "format would produce a string"},
		{"format saturating width", "", `format("%99999999999999999999999s", "")`, "format would produce a string"},
		{"format precision", "", `format("%.999999999f", 1)`, "format would produce a string"},
		{"format argument index", "", `format("%s%[1]s%[1]s", ` + mb + `)`, "format would produce a string"},
		{"replace", "", `replace("aaaa", "a", ` + mb + `)`, "replace would produce a string"},
		{"split", "", `split("", format("%0200000d", 0))`, "split would produce 200000 elements"},
		{"template doubling", "a0 = " + mb + "\na1 = \"${local.a0}${local.a0}\"", `local.a1`, "A string of 2000000 bytes"},
		{"tuple doubling", tupleDoubling(40), `jsonencode(local.l40)`, "costs more than"},
		{"nested for", `s = split("", format("%010000d", 0))`, `[for a in local.s : [for b in local.s : b]]`, "costs more than"},
		{"nested for over literal lists", "", `[for a in ` + literalList(10_000) + ` : [for b in ` + literalList(10_000) + ` : b]]`, "costs more than"},
		{"loop of literal lists", "", `[for a in split("", format("%050000d", 0)) : ` + literalList(5_000) + `]`, "costs more than"},
		{"for over a huge list", "", `[for x in split("", format("%0500000d", 0)) : x]`, "split would produce"},
		{"number literal", "", `1e999999999`, "out of range"},
		{"number product", "", `"${1e1000 * 1e1000}"`, "out of range"},
		{"number product chain", "", `1e1000 * 1e1000 * 1e1000`, "out of range"},
		{"tonumber", "", `tonumber("1e999999")`, "out of range"},
		{"jsonencode", `s = format("%0600000d", 0)`, `jsonencode([local.s, local.s])`, "jsonencode would produce"},
		// Converting a million digits to a number took 3.6 s and 2 GB.
		{"tonumber of a million digits", `d = format("1%0999999d", 0)`, `tonumber(local.d)`, "a number written with 1000000 characters"},
		{"arithmetic on digits", `d = format("1%0999999d", 0)`, `local.d + 1`, "a number written with 1000000 characters"},
		{"comparison of digits", `d = format("1%0999999d", 0)`, `local.d < 1`, "a number written with 1000000 characters"},
		{"max of digits", `d = format("1%0999999d", 0)`, `max(local.d, 1)`, "a number written with 1000000 characters"},
		{"index by digits", `d = format("1%0999999d", 0)`, `[1][local.d]`, "a number written with 1000000 characters"},
		{"format %d of digits", `d = format("1%0999999d", 0)`, `format("%d", local.d)`, "a number written with 1000000 characters"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := "locals {\n" + tc.locals + "\n}\njob \"j\" {\n  group \"g\" {\n    task \"t\" {\n" +
				"      driver = \"exec\"\n      config {\n        x = " + tc.expr + "\n      }\n    }\n  }\n}\n"
			diags, alloc := parseAllocs(t, src, nil)
			t.Logf("allocated %d MiB", alloc>>20)
			if alloc > allocGuard {
				t.Errorf("parse allocated %d MiB", alloc>>20)
			}
			errs := diags.Errs()
			if len(errs) == 0 {
				t.Fatal("no error")
			}
			e := errs[0]
			if e.Summary != "Evaluation limit exceeded" || !strings.Contains(e.Detail, tc.want) || e.Filename != "t.hcl" || e.Line == 0 {
				t.Fatalf("first error %s; want \"Evaluation limit exceeded\" with %q at a position\nall: %s", e, tc.want, diags.Error())
			}
		})
	}
}

// literalList is [1,1,...] with n elements.
func literalList(n int) string {
	return "[" + strings.Repeat("1,", n-1) + "1]"
}

// tupleDoubling defines l0 ... ln where each list holds the previous one
// twice: tiny in memory (values share), 2^n elements written out.
func tupleDoubling(n int) string {
	var b strings.Builder
	b.WriteString("l0 = [\"x\"]\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "l%d = [local.l%d, local.l%d]\n", i, i-1, i-1)
	}
	return b.String()
}

func TestLimitPosition(t *testing.T) {
	src := "job \"j\" {\n  meta {\n    x = upper(join(\",\", split(\"\", format(\"%0200000d\", 0))))\n  }\n" +
		"  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config { command = \"x\" }\n    }\n  }\n}\n"
	_, diags := Parse("t.hcl", []byte(src), nil)
	errs := diags.Errs()
	if len(errs) != 1 {
		t.Fatalf("errors: %s", diags.Error())
	}
	// The split call, not the enclosing upper/join.
	want := `t.hcl:3:25: error: Evaluation limit exceeded; split would produce 200000 elements; the limit is 100000.`
	if errs[0].String() != want {
		t.Fatalf("error\n%s\nwant\n%s", errs[0], want)
	}
}

// TestSourceLimits: the parser recurses per nesting level and per
// operator chain; a megabyte of them overflowed the goroutine stack, a
// fatal error that no recover catches.
func TestSourceLimits(t *testing.T) {
	const n = 1_000_000
	tests := []struct {
		name, expr, want string
	}{
		{"parentheses", strings.Repeat("(", n) + "1" + strings.Repeat(")", n), "Jobspec nests too deeply"},
		{"lists", strings.Repeat("[", n) + strings.Repeat("]", n), "Jobspec nests too deeply"},
		{"templates", strings.Repeat(`"${`, n/3) + "1" + strings.Repeat(`}"`, n/3), "Jobspec nests too deeply"},
		{"directives", `"` + strings.Repeat("%{ if true }", n/12) + `"`, "Jobspec nests too deeply"},
		{"unary", strings.Repeat("!", n) + "true", "Jobspec has too many operators"},
		{"conditionals", strings.Repeat("true ? 1 : ", n/10) + "1", "Jobspec has too many operators"},
		{"sum", "1" + strings.Repeat("+1", n/2), "Jobspec has too many operators"},
		{"long number", "1" + strings.Repeat("0", n), "Number too long"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := "job \"j\" {\n  meta {\n    x = " + tc.expr + "\n  }\n}\n"
			diags, alloc := parseAllocs(t, src, nil)
			if alloc > allocGuard {
				t.Errorf("parse allocated %d MiB", alloc>>20)
			}
			if errs := diags.Errs(); len(errs) != 1 || errs[0].Summary != tc.want || errs[0].Line != 3 {
				t.Fatalf("errors: %s; want one %q on line 3", diags.Error(), tc.want)
			}
		})
	}
}

func TestSourceSizeLimit(t *testing.T) {
	body := "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config { command = \"x\" }\n    }\n  }\n}\n"
	big := body + "#" + strings.Repeat("x", DefaultLimits.MaxSourceBytes)
	_, diags := Parse("t.hcl", []byte(big), nil)
	if errs := diags.Errs(); len(errs) != 1 || errs[0].Summary != "Jobspec too large" {
		t.Fatalf("errors: %s", diags.Error())
	}
	// The caller sets the limit.
	_, diags = Parse("t.hcl", []byte(body), &ParseOptions{Limits: &Limits{MaxSourceBytes: 10}})
	if errs := diags.Errs(); len(errs) != 1 || !strings.Contains(errs[0].Detail, "the limit is 10 bytes") {
		t.Fatalf("errors: %s", diags.Error())
	}
	// ParseFile does not read past the limit.
	path := filepath.Join(t.TempDir(), "big.hcl")
	if err := os.WriteFile(path, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	_, diags = ParseFile(path, nil)
	if errs := diags.Errs(); len(errs) != 1 || errs[0].Summary != "Jobspec too large" ||
		!strings.Contains(errs[0].Detail, fmt.Sprintf("is %d bytes", DefaultLimits.MaxSourceBytes+1)) {
		t.Fatalf("errors: %s", diags.Error())
	}
}

func TestLimitsConfigurable(t *testing.T) {
	opts := &ParseOptions{Limits: &Limits{MaxStringBytes: 100, MaxCollectionLen: 10}}
	_, diags := parseTask(t, "", `config { x = format("%0101d", 0) }`, opts)
	if !strings.Contains(diags.Error(), "the limit is 100 bytes") {
		t.Fatalf("errors: %s", diags.Error())
	}
	_, diags = parseTask(t, "", `config { x = split(",", "1,2,3,4,5,6,7,8,9,10,11") }`, opts)
	if !strings.Contains(diags.Error(), "split would produce 11 elements; the limit is 10") {
		t.Fatalf("errors: %s", diags.Error())
	}
	_, diags = parseTask(t, `locals { s = split(",", "1,2,3,4,5,6") }`, `config { x = concat(local.s, local.s) }`, opts)
	if !strings.Contains(diags.Error(), "concat would produce 12 elements; the limit is 10") {
		t.Fatalf("errors: %s", diags.Error())
	}
	// -var values are bounded too, loops included.
	list := literalList(20_000)
	diags, alloc := parseAllocs(t, `variable "v" { type = list(list(number)) }
job "j" {
  group "g" {
    task "t" {
      driver = "exec"
      config { command = "x" }
    }
  }
}`, &ParseOptions{Vars: map[string]string{"v": "[for a in " + list + " : [for b in " + list + " : b]]"}})
	if alloc > allocGuard || !strings.Contains(diags.Error(), "Invalid value for variable v; Evaluating the jobspec costs more than") {
		t.Fatalf("allocated %d MiB; errors: %s", alloc>>20, diags.Error())
	}
	_, diags = parseTask(t, `variable "v" { type = list(string) }`, `config { x = var.v }`,
		&ParseOptions{Vars: map[string]string{"v": `["a","b","c"]`}, Limits: &Limits{MaxCollectionLen: 2}})
	if !strings.Contains(diags.Error(), "A collection of 3 elements is longer than the limit of 2") {
		t.Fatalf("errors: %s", diags.Error())
	}
	// Strings converted to numbers by a variable's type, as a default or
	// a -var value.
	digits := "1" + strings.Repeat("0", 999_999)
	_, diags = parseTask(t, `variable "n" {
  type    = number
  default = "`+digits+`"
}`, `config { x = var.n }`, nil)
	if !strings.Contains(diags.Error(), "t.hcl:3:13: error: Evaluation limit exceeded; a number written with 1000000 characters") {
		t.Fatalf("errors: %.300s", diags.Error())
	}
	_, diags = parseTask(t, `variable "n" { type = list(number) }`, `config { x = var.n }`,
		&ParseOptions{Vars: map[string]string{"n": `["` + digits + `"]`}})
	if !strings.Contains(diags.Error(), "Invalid value for variable n; a number written with 1000000 characters") {
		t.Fatalf("errors: %.300s", diags.Error())
	}
	if !errors.Is(fmt.Errorf("x: %w", limitErr("y")), ErrLimitExceeded) {
		t.Fatal("limit errors must wrap ErrLimitExceeded")
	}
}

// TestBoundedFunctionsStillWork: every function keeps its behaviour within
// the limits, including a result right at the string limit.
func TestBoundedFunctionsStillWork(t *testing.T) {
	locals := `locals {
  l = [for i, s in split(",", "a,b,c") : "${i}=${upper(s)}" if s != "b"]
  m = merge({ a = 1 }, { b = 2 })
}`
	body := `config {
  join    = join("-", concat(local.l, ["z"]))
  format  = format("%-4s|%5.1f|%03d|%t|%q|%v", "ab", 3.14159, 7, true, "q", [1])
  replace = replace("a.b.c", ".", "::")
  json    = jsonencode(local.m)
  num     = max(1, 5, 3) + min(4, 2) * 2
  str     = tostring(tonumber("42"))
  trim    = trimspace(lower("  HeLLo "))
  coal    = coalesce(null, "x")
  strnum  = max("5", 1) + "2" * 2
  index   = ["a", "b"]["1"]
}`
	task, diags := parseTask(t, locals, body, nil)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	want := map[string]any{"join": "0=A-2=C-z", "format": `ab  |  3.1|007|true|"q"|[1]`, "replace": "a::b::c",
		"json": `{"a":1,"b":2}`, "num": 9, "str": "42", "trim": "hello", "coal": "x", "strnum": 9, "index": "b"}
	for k, v := range want {
		if task.Config[k] != v {
			t.Errorf("%s = %#v, want %#v", k, task.Config[k], v)
		}
	}
	task, diags = parseTask(t, "", `config { x = format("%01048576d", 0) }`, nil)
	if diags.HasErrors() || len(task.Config["x"].(string)) != DefaultLimits.MaxStringBytes {
		t.Fatalf("a string at the limit: %s", diags.Error())
	}
}

// TestUnavailableFunctions: functions whose results can dwarf their
// arguments (range, setproduct, formatlist, indent, regex_replace) are
// offered within the collection and string limits.
func TestUnavailableFunctions(t *testing.T) {
	big := strings.Repeat("a", 4096)
	for expr, want := range map[string]string{
		`range(1e9)`: "range would produce 1000000000 elements",
		`regex_replace("` + big + `", "", "` + big + `")`:         "regex_replace would produce a string",
		`setproduct(range(1000), range(1000))`:                    "setproduct would produce more than",
		`formatlist("` + big + `%s", [for i in range(1000) : i])`: "formatlist would produce a string",
		`indent(1000000, "` + strings.Repeat("a\\n", 100) + `")`:  "indent would produce a string",
	} {
		_, diags := parseTask(t, "", "config { x = "+expr+" }", nil)
		if !diags.HasErrors() || !strings.Contains(diags.Error(), want) {
			t.Errorf("%.60s: %v, want %q", expr, diags, want)
		}
	}
	task, diags := parseTask(t, "", `config {
  fl = join(",", formatlist("%s=%d", ["a", "b"], [1, 2]))
  in = indent(2, "x\ny")
  sp = length(setproduct(["a", "b"], [1, 2, 3]))
}`, nil)
	if diags.HasErrors() || task.Config["fl"] != "a=1,b=2" || task.Config["in"] != "x\n  y" || task.Config["sp"] != 6 {
		t.Errorf("small calls: %v %v", task.Config, diags)
	}
}
