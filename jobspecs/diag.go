package jobspecs

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Severity says whether a diagnostic stops a job from being accepted.
type Severity int

const (
	// SeverityError marks a problem that makes the jobspec invalid.
	SeverityError Severity = iota + 1
	// SeverityWarning marks something accepted but ignored or risky.
	SeverityWarning
)

// String returns "error" or "warning".
func (s Severity) String() string {
	if s == SeverityWarning {
		return "warning"
	}
	return "error"
}

// Diagnostic is one positioned problem. Line and Column are 1-based; both
// are 0 when the problem has no position (e.g. a -var for an undeclared
// variable).
type Diagnostic struct {
	Severity Severity
	Summary  string
	Detail   string
	Filename string
	Line     int
	Column   int
}

// String renders the diagnostic on one line:
// "job.hcl:12:5: error: Summary; Detail".
func (d Diagnostic) String() string {
	var b strings.Builder
	switch {
	case d.Filename != "" && d.Line > 0:
		fmt.Fprintf(&b, "%s:%d:%d: ", d.Filename, d.Line, d.Column)
	case d.Filename != "":
		fmt.Fprintf(&b, "%s: ", d.Filename)
	}
	b.WriteString(d.Severity.String())
	b.WriteString(": ")
	b.WriteString(oneLine(d.Summary))
	if d.Detail != "" {
		b.WriteString("; ")
		b.WriteString(oneLine(d.Detail))
	}
	return b.String()
}

// oneLine collapses runs of whitespace (including newlines) into one space.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// Diagnostics is a list of diagnostics, errors and warnings mixed.
type Diagnostics []Diagnostic

// HasErrors reports whether any diagnostic is an error.
func (ds Diagnostics) HasErrors() bool {
	return slices.ContainsFunc(ds, func(d Diagnostic) bool { return d.Severity == SeverityError })
}

// Errs returns the errors only.
func (ds Diagnostics) Errs() Diagnostics { return ds.filter(SeverityError) }

// Warnings returns the warnings only.
func (ds Diagnostics) Warnings() Diagnostics { return ds.filter(SeverityWarning) }

func (ds Diagnostics) filter(s Severity) Diagnostics {
	var out Diagnostics
	for _, d := range ds {
		if d.Severity == s {
			out = append(out, d)
		}
	}
	return out
}

// Error renders every error, one per line. It is empty when there are none.
func (ds Diagnostics) Error() string {
	var lines []string
	for _, d := range ds.Errs() {
		lines = append(lines, d.String())
	}
	return strings.Join(lines, "\n")
}

// sortDiagnostics orders diagnostics by position; unpositioned ones come
// first. The sort is stable so diagnostics at one position keep their order.
func sortDiagnostics(ds Diagnostics) {
	slices.SortStableFunc(ds, func(a, b Diagnostic) int {
		return cmp.Or(cmp.Compare(a.Filename, b.Filename),
			cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
}

// uniqueDiagnostics drops exact repeats, keeping the first of each: the
// blocks a dynamic block generates share their source, so one mistake in
// its content would otherwise be reported once per iteration.
func uniqueDiagnostics(ds Diagnostics) Diagnostics {
	seen := make(map[Diagnostic]bool, len(ds))
	out := ds[:0]
	for _, d := range ds {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// fromHCL converts HCL's diagnostics.
func fromHCL(hds hcl.Diagnostics) Diagnostics {
	out := make(Diagnostics, 0, len(hds))
	for _, hd := range hds {
		d := Diagnostic{Severity: SeverityError, Summary: hd.Summary, Detail: hd.Detail}
		if extra, ok := hcl.DiagnosticExtra[hclsyntax.FunctionCallDiagExtra](hd); ok {
			if err := extra.FunctionCallError(); errors.Is(err, ErrLimitExceeded) {
				d.Summary, d.Detail = limitSummary, limitDetail(err)
			}
		}
		if hd.Severity == hcl.DiagWarning {
			d.Severity = SeverityWarning
		}
		if hd.Subject != nil {
			d.Filename = hd.Subject.Filename
			d.Line, d.Column = hd.Subject.Start.Line, hd.Subject.Start.Column
		}
		out = append(out, d)
	}
	return out
}
