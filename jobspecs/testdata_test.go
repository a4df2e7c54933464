package jobspecs

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/invalid/*.golden from the parser's output")

// TestValidJobspecs parses every example and valid test jobspec: no
// errors, and exactly the expected warnings (by summary, in order).
func TestValidJobspecs(t *testing.T) {
	want := map[string][]string{
		"canary.hcl":                            nil,
		"countdash.hcl":                         nil,
		"countdash-cluster.hcl":                 nil,
		"countdash-docker.hcl":                  nil,
		"grpc.hcl":                              nil,
		"ingress-gateway.hcl":                   nil,
		"hello.hcl":                             nil,
		"hello-exec.hcl":                        nil,
		"mesh-gateway.hcl":                      nil,
		"terminating-gateway.hcl":               nil,
		"testdata/valid/countdash-docker.hcl":   nil,
		"testdata/valid/multi-upstream.hcl":     nil,
		"testdata/valid/batch-lifecycle.hcl":    nil,
		"testdata/valid/checks.hcl":             nil,
		"testdata/valid/expose.hcl":             nil,
		"testdata/valid/runtime-references.hcl": {`Unknown raw_exec config key "nested"; ignored`},
		"testdata/valid/sidecar-overrides.hcl":  nil,
		"testdata/valid/spread.hcl":             nil,
		"testdata/valid/system.hcl":             nil,
		"testdata/valid/unsupported-blocks.hcl": {
			unsupportedMsg("all_at_once"),
			unsupportedMsg("stop_after_client_disconnect"), unsupportedMsg("ephemeral_disk"),
			unsupportedMsg("volume"), unsupportedMsg("affinity"),
			unsupportedMsg("migrate"), unsupportedMsg("enable_tag_override"),
			"connect native is not supported by meshlet yet", `Driver "podman" is not built into meshlet`,
			unsupportedMsg("vault"), unsupportedMsg("volume_mount"),
		},
	}
	files := hclFiles(t)
	for _, f := range files {
		if strings.HasPrefix(f, "testdata/invalid/") {
			continue
		}
		if _, ok := want[f]; !ok {
			t.Errorf("%s: no expectation in TestValidJobspecs; add one", f)
		}
	}
	for file, wantWarnings := range want {
		t.Run(file, func(t *testing.T) {
			job, diags := ParseFile(file, nil)
			if diags.HasErrors() {
				t.Fatalf("unexpected errors:\n%s", diags.Error())
			}
			if job == nil {
				t.Fatal("no job")
			}
			var got []string
			for _, d := range diags.Warnings() {
				got = append(got, d.Summary)
				if d.Line == 0 {
					t.Errorf("warning without position: %s", d)
				}
			}
			if !slices.Equal(got, wantWarnings) {
				t.Errorf("warnings:\n got %q\nwant %q", got, wantWarnings)
			}
			if _, err := Validate(job); err != nil {
				t.Errorf("Validate of the parsed job failed: %v", err)
			}
		})
	}
}

// TestInvalidJobspecs compares every diagnostic of each invalid jobspec
// with its golden file (go test -run TestInvalidJobspecs -update rewrites
// them; review the diff).
func TestInvalidJobspecs(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.hcl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no invalid jobspecs: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			_, diags := ParseFile(file, nil)
			if !diags.HasErrors() {
				t.Fatalf("no errors for %s", file)
			}
			var lines []string
			for _, d := range diags {
				lines = append(lines, d.String())
			}
			got := strings.Join(lines, "\n") + "\n"
			golden := strings.TrimSuffix(file, ".hcl") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("read golden: %v", err)
			}
			if got != string(want) {
				t.Errorf("diagnostics differ from %s:\n--- got\n%s--- want\n%s", golden, got, want)
			}
		})
	}
}

// hclFiles lists every .hcl file under the package directory.
func hclFiles(t testing.TB) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".hcl") {
			files = append(files, filepath.ToSlash(path))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
