package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"
)

// Report is everything one `make bench` run produced; it is written as
// results.json and rendered as RESULTS.md.
type Report struct {
	Machine  Machine `json:"machine"`
	Started  string  `json:"started"`
	Duration string  `json:"duration"`
	Areas    []*Area `json:"areas"`
}

// Area is one table of the report.
type Area struct {
	Name string `json:"name"`
	// Key is the area's -areas key ("dataplane", "l7"...).
	Key string `json:"key,omitempty"`
	// Intro says what "measured" and "baseline" mean in this area.
	Intro   string    `json:"intro"`
	Figures []*Figure `json:"figures"`
	// Findings are what the profiles (or the run) showed.
	Findings []string `json:"findings,omitempty"`
	// Elapsed is how long the area took.
	Elapsed string `json:"elapsed,omitempty"`
	// Run is set on an area measured by a partial run merged into the
	// results of an earlier one: when and at which commit it ran.
	Run string `json:"run,omitempty"`
}

// Figure is one measured value with its baseline.
type Figure struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	// Value is the measured figure (mesh path, new code...); nil when not
	// measured.
	Value *float64 `json:"value,omitempty"`
	// Baseline is the same quantity measured the plain way in the same
	// run; nil when the figure has no baseline.
	Baseline *float64 `json:"baseline,omitempty"`
	// Ratio is Value/Baseline.
	Ratio  *float64 `json:"ratio,omitempty"`
	Target *Target  `json:"target,omitempty"`
	// Met is whether Target holds; nil without a target or a value.
	Met *bool `json:"met,omitempty"`
	// NotMeasured says why Value is missing.
	NotMeasured string `json:"not_measured,omitempty"`
	Note        string `json:"note,omitempty"`
}

// What a Target constrains.
const (
	OfValue = "value" // the measured figure
	OfRatio = "ratio" // Value/Baseline
	OfAdded = "added" // Value-Baseline
	OfBoth  = "both"  // the measured figure and the baseline (two modes of one thing)
)

// Target is a goal from the issue.
type Target struct {
	Of    string  `json:"of"`
	Op    string  `json:"op"` // "<=" or ">="
	Limit float64 `json:"limit"`
	// Ref is a reference figure from elsewhere (e.g. Istio's), shown as is.
	Ref string `json:"ref,omitempty"`
}

// String renders the target for a table cell.
func (t *Target) String() string {
	if t == nil {
		return ""
	}
	op := map[string]string{"<=": "≤", ">=": "≥"}[t.Op]
	s := ""
	switch t.Of {
	case OfRatio:
		s = fmt.Sprintf("ratio %s %s", op, fmtNum(t.Limit))
	case OfAdded:
		s = fmt.Sprintf("added %s %s", op, fmtNum(t.Limit))
	case OfBoth:
		s = fmt.Sprintf("%s %s (both)", op, fmtNum(t.Limit))
	default:
		s = fmt.Sprintf("%s %s", op, fmtNum(t.Limit))
	}
	if t.Ref != "" {
		s += " (" + t.Ref + ")"
	}
	return s
}

func (t *Target) holds(v float64) bool {
	if t.Op == ">=" {
		return v >= t.Limit
	}
	return v <= t.Limit
}

// Measured returns a figure with a value and an optional baseline (NaN or
// negative baselines are treated as absent); Ratio and Met are filled in.
func Measured(name, unit string, value float64, baseline *float64, target *Target) *Figure {
	f := &Figure{Name: name, Unit: unit, Value: ptr(value), Baseline: baseline, Target: target}
	f.complete()
	return f
}

// NotMeasured returns a figure that could not be measured, with the reason.
func NotMeasured(name, unit, reason string, target *Target) *Figure {
	return &Figure{Name: name, Unit: unit, NotMeasured: reason, Target: target}
}

// complete fills Ratio and Met from Value, Baseline and Target.
func (f *Figure) complete() {
	if f.Baseline != nil && (math.IsNaN(*f.Baseline) || math.IsInf(*f.Baseline, 0)) {
		f.Baseline = nil
	}
	if f.Value != nil && f.Baseline != nil && *f.Baseline != 0 {
		f.Ratio = ptr(*f.Value / *f.Baseline)
	}
	if f.Target == nil || f.Value == nil {
		return
	}
	switch f.Target.Of {
	case OfRatio:
		if f.Ratio != nil {
			f.Met = ptr(f.Target.holds(*f.Ratio))
		}
	case OfAdded:
		if f.Baseline != nil {
			f.Met = ptr(f.Target.holds(*f.Value - *f.Baseline))
		}
	case OfBoth:
		ok := f.Target.holds(*f.Value)
		if f.Baseline != nil {
			ok = ok && f.Target.holds(*f.Baseline)
		}
		f.Met = ptr(ok)
	default:
		f.Met = ptr(f.Target.holds(*f.Value))
	}
}

// Missed lists the figures whose target is not met, and those with a
// target that were not measured, as "area: figure" lines.
func (r *Report) Missed() (missed, unmeasured []string) {
	for _, a := range r.Areas {
		for _, f := range a.Figures {
			switch {
			case f.Met != nil && !*f.Met:
				missed = append(missed, fmt.Sprintf("%s: %s", a.Name, f.Name))
			case f.Target != nil && f.Value == nil:
				unmeasured = append(unmeasured, fmt.Sprintf("%s: %s", a.Name, f.Name))
			}
		}
	}
	return missed, unmeasured
}

// WriteJSON writes the report as indented JSON to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("failed to encode results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("failed to write results: %w", err)
	}
	return nil
}

// WriteMarkdown renders the report to path.
func (r *Report) WriteMarkdown(path string) error {
	if err := os.WriteFile(path, []byte(Render(r)), 0o644); err != nil {
		return fmt.Errorf("failed to write results: %w", err)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// ms converts a duration to float milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
