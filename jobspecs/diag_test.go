package jobspecs

import (
	"testing"
)

func TestDiagnosticString(t *testing.T) {
	tests := []struct {
		d    Diagnostic
		want string
	}{
		{Diagnostic{Severity: SeverityError, Summary: "Unsupported argument", Detail: `An argument named "foo" is not expected here.`,
			Filename: "job.hcl", Line: 12, Column: 5},
			`job.hcl:12:5: error: Unsupported argument; An argument named "foo" is not expected here.`},
		{Diagnostic{Severity: SeverityWarning, Summary: "vault is not supported by meshlet yet; ignored", Filename: "job.hcl", Line: 3, Column: 1},
			"job.hcl:3:1: warning: vault is not supported by meshlet yet; ignored"},
		{Diagnostic{Severity: SeverityError, Summary: "Undefined variable x", Detail: "multi\n  line\tdetail", Filename: "job.hcl"},
			"job.hcl: error: Undefined variable x; multi line detail"},
		{Diagnostic{Severity: SeverityError, Summary: "No file"}, "error: No file"},
	}
	for _, tc := range tests {
		if got := tc.d.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func TestDiagnosticsFilters(t *testing.T) {
	ds := Diagnostics{
		{Severity: SeverityWarning, Summary: "w1", Filename: "f", Line: 1, Column: 1},
		{Severity: SeverityError, Summary: "e1", Filename: "f", Line: 2, Column: 1},
		{Severity: SeverityError, Summary: "e2", Filename: "f", Line: 3, Column: 1},
	}
	if !ds.HasErrors() || len(ds.Errs()) != 2 || len(ds.Warnings()) != 1 {
		t.Fatalf("filters wrong: %v", ds)
	}
	if want := "f:2:1: error: e1\nf:3:1: error: e2"; ds.Error() != want {
		t.Errorf("Error() = %q, want %q", ds.Error(), want)
	}
	if ds.Warnings().HasErrors() || ds.Warnings().Error() != "" {
		t.Error("warnings reported as errors")
	}
	var none Diagnostics
	if none.HasErrors() || none.Error() != "" {
		t.Error("empty diagnostics have errors")
	}
}
