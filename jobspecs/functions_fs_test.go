package jobspecs

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fsTree makes a directory for the file-system functions:
// conf/{a.txt,b.txt,big.log,bin.dat,sub/c.txt,sub/d.json}.
func fsTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"conf/a.txt": "a", "conf/b.txt": "b", "conf/bin.dat": "\xff\xfe",
		"conf/sub/c.txt": "c", "conf/sub/d.json": "{}", "conf/big.log": strings.Repeat("x", 100),
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// parseTaskFile writes a job whose task config is x = expr (on line 6,
// from column 20, as parseTask) to dir/t.hcl and parses it as the CLI
// does.
func parseTaskFile(t *testing.T, dir, expr string, opts *ParseOptions) (any, Diagnostics) {
	t.Helper()
	src := "\njob \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"test\"\n      config { x = " + expr +
		" }\n    }\n  }\n}\n"
	path := filepath.Join(dir, "t.hcl")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	job, diags := ParseFile(path, opts)
	if job == nil || diags.HasErrors() {
		return nil, diags
	}
	return job.TaskGroups[0].Tasks[0].Config["x"], diags
}

// Nomad's path and file functions, relative to the jobspec's directory.
func TestFileSystemFunctions(t *testing.T) {
	dir := fsTree(t)
	t.Setenv("HOME", "/home/meshlet")
	tests := []struct {
		name, expr string
		want       any
	}{
		{"fileset", `fileset("conf", "*.txt")`, []any{"a.txt", "b.txt"}},
		{"fileset any depth", `fileset("conf", "**/*.txt")`, []any{"a.txt", "b.txt", "sub/c.txt"}},
		{"fileset alternatives", `fileset(".", "conf/{sub/*.json,a.*}")`, []any{"conf/a.txt", "conf/sub/d.json"}},
		{"fileset dot pattern", `fileset("conf/sub", "./*")`, []any{"c.txt", "d.json"}},
		{"fileset absolute", `fileset("` + filepath.ToSlash(dir) + `/conf", "sub/c.*")`, []any{"sub/c.txt"}},
		{"fileset missing dir", `fileset("nope", "*")`, []any{}},
		{"file in fileset", `[for f in fileset("conf", "*.txt") : file("conf/${f}")]`, []any{"a", "b"}},
		{"filebase64", `filebase64("conf/bin.dat")`, base64.StdEncoding.EncodeToString([]byte("\xff\xfe"))},
		{"abspath", `abspath("conf/../conf/a.txt")`, filepath.ToSlash(filepath.Join(dir, "conf", "a.txt"))},
		{"abspath absolute", `abspath("/etc/x")`, "/etc/x"},
		{"basename", `basename("conf/sub/c.txt")`, "c.txt"},
		{"dirname", `dirname("conf/sub/c.txt")`, "conf/sub"},
		{"pathexpand", `pathexpand("~/jobs")`, "/home/meshlet/jobs"},
		{"pathexpand plain", `pathexpand("jobs")`, "jobs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, diags := parseTaskFile(t, dir, tc.expr, nil)
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s = %#v, want %#v", tc.expr, got, tc.want)
			}
		})
	}
}

// Errors and bounds of the file-system functions, at the call.
func TestFileSystemFunctionErrors(t *testing.T) {
	dir := fsTree(t)
	small := &ParseOptions{Limits: &Limits{MaxStringBytes: 4, MaxCollectionLen: 3}}
	tests := []struct {
		name, expr string
		opts       *ParseOptions
		want       string
	}{
		{"file not UTF-8", `file("conf/bin.dat")`, nil,
			`t.hcl:6:20: error: Error in function call; Call to function "file" failed: file: conf/bin.dat is not valid UTF-8 (filebase64 reads any file).`},
		{"file missing", `file("conf/none")`, nil,
			`t.hcl:6:20: error: Error in function call; Call to function "file" failed: file: open ` + dir + `/conf/none: no such file or directory.`},
		{"fileset bad pattern", `fileset("conf", "[")`, nil,
			`t.hcl:6:20: error: Error in function call; Call to function "fileset" failed: fileset: invalid pattern "[": syntax error in pattern.`},
		{"fileset visits", `fileset("conf", "**")`, small,
			`t.hcl:6:20: error: Evaluation limit exceeded; fileset visited more than 3 files and directories under ` + dir + `/conf; narrow the path or the pattern.`},
		{"filebase64 size", `filebase64("conf/big.log")`, &ParseOptions{Limits: &Limits{MaxStringBytes: 64}},
			`t.hcl:6:20: error: Evaluation limit exceeded; filebase64: conf/big.log is larger than the limit of 48 bytes.`},
		{"file size", `file("conf/big.log")`, &ParseOptions{Limits: &Limits{MaxStringBytes: 64}},
			`t.hcl:6:20: error: Evaluation limit exceeded; file: conf/big.log is larger than the limit of 64 bytes.`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := parseTaskFile(t, dir, tc.expr, tc.opts)
			errs := diags.Errs()
			if len(errs) == 0 || strings.TrimPrefix(errs[0].String(), dir+"/") != tc.want {
				t.Fatalf("first error\n%v\nwant\n%s\nall: %s", errs, tc.want, diags.Error())
			}
		})
	}
}

// A jobspec parsed from bytes (the agent's /v1/jobs/parse) has none of
// the file-system functions, as in Nomad.
func TestFileSystemFunctionsNotOnServers(t *testing.T) {
	for _, call := range []string{`file("a")`, `filebase64("a")`, `fileexists("a")`, `fileset(".", "*")`,
		`abspath("a")`, `basename("a")`, `dirname("a")`, `pathexpand("~")`} {
		_, diags := parseTask(t, "", "      config { x = "+call+" }", nil)
		name := call[:strings.IndexByte(call, '(')]
		want := `t.hcl:6:20: error: Call to unknown function; There is no function named "` + name + `".`
		if errs := diags.Errs(); len(errs) == 0 || !strings.HasPrefix(errs[0].String(), want) {
			t.Errorf("%s: %s, want %s", call, diags.Error(), want)
		}
	}
}

// fileset matches a symbolic link to a regular file but does not follow
// one to a directory (a loop would never end).
func TestFileSetSymlinks(t *testing.T) {
	dir := fsTree(t)
	if err := os.Symlink("a.txt", filepath.Join(dir, "conf", "link.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".", filepath.Join(dir, "conf", "loop")); err != nil {
		t.Fatal(err)
	}
	got, diags := parseTaskFile(t, dir, `fileset("conf", "**/*.txt")`, nil)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	if want := []any{"a.txt", "b.txt", "link.txt", "sub/c.txt"}; !reflect.DeepEqual(got, want) {
		t.Errorf("fileset = %#v, want %#v", got, want)
	}
}
