package jobspecs

import (
	"os"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse, seeded with every jobspec in
// the package. Parse must never panic; a nil job must come with an error;
// a parsed job must survive Canonicalize and Validate.
func FuzzParse(f *testing.F) {
	for _, file := range hclFiles(f) {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	// Expressions that exercise the evaluation limits and the source scan.
	f.Add([]byte(`locals {
  s = split("", format("%05d", 0))
  l = [for i, x in local.s : "${i}:${x}" if x != "1"]
  m = merge({ a = 1 }, { b = [1, 2 * 3, -4] })
}
job "j" {
  meta { x = join(",", local.l) }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", <<-EOT
          echo %{ if true }${jsonencode(local.m)}%{ endif } $${HOME}
          EOT
        ]
      }
    }
  }
}
`))
	f.Fuzz(func(t *testing.T, src []byte) {
		job, diags := Parse("fuzz.hcl", src, &ParseOptions{Vars: map[string]string{}})
		if job == nil {
			if !diags.HasErrors() {
				t.Fatalf("nil job without errors: %v", diags)
			}
			return
		}
		for _, d := range diags {
			_ = d.String()
		}
		Canonicalize(job)
		_, _ = Validate(job)
	})
}
