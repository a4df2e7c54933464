package jobspecs

import (
	"reflect"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/structs"
)

// artifactTask is a task with body appended, starting on line 3 of the
// group; the body starts on line 6.
func artifactTask(body string) string {
	return "task \"t\" {\n  driver = \"exec\"\n  config { command = \"x\" }\n" + body + "\n}"
}

func TestArtifactDecode(t *testing.T) {
	src := "job \"j\" {\n  group \"g\" {\n" + artifactTask(`  artifact {
    source      = "https://example.invalid/app.tar.gz"
    destination = "local/app"
    mode        = "dir"
    chown       = true
    insecure    = true
    options {
      checksum = "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
      archive  = false
    }
    headers {
      X-Token = "abc"
    }
  }
  artifact {
    source = "local/x.bin"
    mode   = "file"
  }`) + "\n  }\n}\n"
	job, diags := Parse("t.hcl", []byte(src), nil)
	if diags.HasErrors() || len(diags) != 0 {
		t.Fatalf("diagnostics: %v", diags)
	}
	got := job.TaskGroups[0].Tasks[0].Artifacts
	want := []*structs.TaskArtifact{{
		GetterSource: "https://example.invalid/app.tar.gz",
		GetterOptions: map[string]string{
			"checksum": "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
			"archive":  "false",
		},
		GetterHeaders: map[string]string{"X-Token": "abc"},
		GetterMode:    "dir", RelativeDest: "local/app", Chown: true, GetterInsecure: true,
	}, {GetterSource: "local/x.bin", GetterMode: "file"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("artifacts:\n%+v\nwant:\n%+v", got, want)
	}
	if d := got[1].Dest(); d != "local/x.bin" {
		t.Errorf("file mode default destination = %q, want local/x.bin", d)
	}
	if d := (&structs.TaskArtifact{GetterSource: "https://h/a.tgz"}).Dest(); d != "local/" {
		t.Errorf("default destination = %q, want local/", d)
	}
}

func TestArtifactValidation(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string
	}{
		{"missing source", "  artifact {\n    destination = \"local/\"\n  }",
			[]string{`t.hcl:6:3: error: Missing artifact source; source must be specified.`}},
		{"source of the wrong type", "  artifact {\n    source = [\"a\"]\n  }",
			[]string{`t.hcl:7:14: error: Incorrect attribute value type; Inappropriate value for attribute "source": a string is required.`}},
		{"bad mode", "  artifact {\n    source = \"https://h/a\"\n    mode = \"folder\"\n  }",
			[]string{`t.hcl:8:12: error: Invalid artifact mode; invalid artifact mode "folder"; must be one of: any, file, dir.`}},
		{"escaping destination", "  artifact {\n    source = \"https://h/a\"\n    destination = \"local/../../etc\"\n  }",
			[]string{`t.hcl:8:19: error: Invalid artifact destination; destination "local/../../etc" escapes the task directory.`}},
		{"absolute destination stays in the task dir", "  artifact {\n    source = \"https://h/a\"\n    destination = \"/local/x\"\n  }", nil},
		{"destination into the alloc dir escapes", "  artifact {\n    source = \"https://h/a\"\n    destination = \"../alloc/x\"\n  }",
			[]string{`t.hcl:8:19: error: Invalid artifact destination; destination "../alloc/x" escapes the task directory.`}},
		{"checksum without type", "  artifact {\n    source = \"https://h/a\"\n    options {\n      checksum = \"abcd\"\n    }\n  }",
			[]string{`t.hcl:8:5: error: Invalid artifact checksum; checksum must be given as "type:value"; got "abcd".`}},
		{"checksum bad type", "  artifact {\n    source = \"https://h/a\"\n    options = { checksum = \"crc32:abcd\" }\n  }",
			[]string{`t.hcl:8:15: error: Invalid artifact checksum; unsupported checksum type: crc32; use md5, sha1, sha256 or sha512.`}},
		{"checksum bad length", "  artifact {\n    source = \"https://h/a\"\n    options { checksum = \"md5:abcd\" }\n  }",
			[]string{`t.hcl:8:5: error: Invalid artifact checksum; invalid md5 checksum: abcd.`}},
		{"checksum not hex", "  artifact {\n    source = \"https://h/a\"\n    options { checksum = \"sha1:zz\" }\n  }",
			[]string{`t.hcl:8:5: error: Invalid artifact checksum; invalid checksum: encoding/hex: invalid byte: U+007A 'z'.`}},
		{"interpolated checksum is left to the client", "  artifact {\n    source = \"https://h/a\"\n    options { checksum = \"${NOMAD_META_sum}\" }\n  }", nil},
		{"bad archive", "  artifact {\n    source = \"https://h/a\"\n    options { archive = \"rar\" }\n  }",
			[]string{`t.hcl:8:5: error: Invalid artifact archive option; archive "rar" must be false, true or one of: tar.gz, tgz, zip, gz, tar.bz2, tbz2, tar.xz, txz, tar.`}},
		{"git getter", "  artifact {\n    source = \"git::https://h/r.git\"\n  }",
			[]string{`t.hcl:7:14: error: Unsupported artifact source; meshlet fetches artifacts over http, https and from local files; the "git" getter of "git::https://h/r.git" is not available.`}},
		{"s3 scheme", "  artifact {\n    source = \"s3://bucket/a\"\n  }",
			[]string{`t.hcl:7:14: error: Unsupported artifact source; meshlet fetches artifacts over http, https and from local files; scheme "s3" of "s3://bucket/a" is not supported.`}},
		{"unknown option warns", "  artifact {\n    source = \"https://h/a\"\n    options { ref = \"main\" }\n  }",
			[]string{`t.hcl:8:5: warning: Artifact option "ref" is passed on as a URL query parameter; meshlet's getters (http, https, file) use only checksum, archive, filename.`}},
		{"typo", "  artifact {\n    source = \"https://h/a\"\n    destinaton = \"x\"\n  }",
			[]string{`t.hcl:8:5: error: Unsupported argument; An argument named "destinaton" is not expected here. Did you mean "destination"?`}},
		{"labels", "  artifact \"a\" {\n    source = \"https://h/a\"\n  }",
			[]string{`t.hcl:6:12: error: Extraneous label for artifact; artifact blocks take no labels.`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, d := range parseGroup(t, artifactTask(tt.body)) {
				got = append(got, d.String())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("diagnostics:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// A JSON job (no positions) gets the same rules, named by path.
func TestArtifactValidateJSON(t *testing.T) {
	job := &structs.Job{ID: "j", Name: "j", TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 1, Tasks: []*structs.Task{{
		Name: "t", Driver: "raw_exec", Config: map[string]any{"command": "x"},
		Artifacts: []*structs.TaskArtifact{{RelativeDest: "../../x", GetterMode: "x"}},
	}}}}}
	_, err := Validate(job)
	want := "invalid job:\n" +
		`group "g": task "t": artifact[0]: Missing artifact source; source must be specified.` + "\n" +
		`group "g": task "t": artifact[0]: Invalid artifact mode; invalid artifact mode "x"; must be one of: any, file, dir.` + "\n" +
		`group "g": task "t": artifact[0]: Invalid artifact destination; destination "../../x" escapes the task directory.`
	if err == nil || err.Error() != want {
		t.Errorf("error:\n%v\nwant:\n%s", err, want)
	}
}
