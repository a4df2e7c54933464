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
	// Nomad's CIDR, YAML and convert functions; convert's type argument
	// is syntax that the rewrite leaves alone.
	f.Add([]byte(`locals {
  y = yamldecode("a: &a [1, 2]\nb: *a\n")
  c = convert({ n = 1, l = [true] }, object({ n = string, l = list(string) }))
}
job "j" {
  meta {
    net = join(",", cidrsubnets(cidrsubnet("10.0.0.0/8", 8, 1), 4, 4))
    y   = yamlencode(local.y)
    c   = local.c.l[0]
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = cidrhost("10.0.0.0/24", 5) }
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
