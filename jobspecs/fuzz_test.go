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
