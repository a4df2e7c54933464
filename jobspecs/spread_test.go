package jobspecs

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/structs"
)

func TestParseSpread(t *testing.T) {
	src := `job "j" {
  spread {
    attribute = "${node.datacenter}"
    weight    = 100
    target "dc1" { percent = 50 }
  }
  group "g" {
    spread {
      attribute = "${meta.rack}"
    }
    task "t" {
      driver = "exec"
      config { command = "x" }
    }
  }
}
`
	job, diags := Parse("t.hcl", []byte(src), nil)
	if diags.HasErrors() || len(diags.Warnings()) != 0 || job == nil {
		t.Fatalf("diags: %v", diags)
	}
	w := 100
	want := []*structs.Spread{{Attribute: "${node.datacenter}", Weight: &w,
		SpreadTarget: []*structs.SpreadTarget{{Value: "dc1", Percent: 50}}}}
	if !reflect.DeepEqual(job.Spreads, want) {
		t.Errorf("job spreads = %+v", job.Spreads[0])
	}
	gs := job.TaskGroups[0].Spreads
	if len(gs) != 1 || gs[0].Attribute != "${meta.rack}" || gs[0].Weight == nil || *gs[0].Weight != DefaultSpreadWeight {
		t.Errorf("group spread = %+v (the weight defaults to %d)", gs, DefaultSpreadWeight)
	}
}

func TestSpreadErrors(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string
	}{
		{"weight out of range", `spread {
  attribute = "${node.datacenter}"
  weight = 0
}`, []string{"t.hcl:5:12: error: Invalid spread weight; Weight 0 is out of range 1-100."}},
		{"weight above 100", `spread {
  attribute = "${node.datacenter}"
  weight = 150
}`, []string{"t.hcl:5:12: error: Invalid spread weight; Weight 150 is out of range 1-100."}},
		{"missing attribute", `spread { weight = 10 }`,
			[]string{`t.hcl:3:1: error: Missing spread attribute; A spread needs an attribute, e.g. attribute = "${node.datacenter}".`}},
		{"literal attribute", `spread { attribute = "datacenter" }`,
			[]string{`t.hcl:3:22: error: Invalid spread attribute; Attribute "datacenter" must name a node attribute, e.g. "${node.datacenter}" or "${meta.rack}".`}},
		{"percent out of range", `spread {
  attribute = "${node.datacenter}"
  target "dc1" { percent = 120 }
}`, []string{`t.hcl:5:28: error: Invalid spread target percent; Percent 120 for target "dc1" is out of range 0-100.`}},
		{"percents over 100", `spread {
  attribute = "${node.datacenter}"
  target "dc1" { percent = 60 }
  target "dc2" { percent = 60 }
}`, []string{"t.hcl:3:1: error: Invalid spread targets; The target percents add up to 120%; they must not exceed 100%."}},
		{"duplicate target", `spread {
  attribute = "${node.datacenter}"
  target "dc1" { percent = 10 }
  target "dc1" { percent = 20 }
}`, []string{`t.hcl:6:3: error: Duplicate spread target; Target "dc1" is defined more than once in this spread.`}},
		{"target without value", `spread {
  attribute = "${node.datacenter}"
  target { percent = 10 }
}`, []string{"t.hcl:5:10: error: Missing value for target; All target blocks must have 1 label(s): value."}},
		{"unknown argument", `spread {
  attribute = "${node.datacenter}"
  wieght = 10
}`, []string{`t.hcl:5:3: error: Unsupported argument; An argument named "wieght" is not expected here. Did you mean "weight"?`}},
		{"weight not a number", `spread {
  attribute = "${node.datacenter}"
  weight = "heavy"
}`, []string{`t.hcl:5:12: error: Incorrect attribute value type; Inappropriate value for attribute "weight": a number is required.`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// At group level (parseGroup: the body starts on line 3) ...
			var got []string
			for _, d := range parseGroup(t, tc.body+"\n"+okTask) {
				got = append(got, d.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("group level:\n got %q\nwant %q", got, tc.want)
			}
			// ... and at job level: the same block starts on line 2.
			src := "job \"j\" {\n" + tc.body + "\n  group \"g\" {\n" + okTask + "\n  }\n}\n"
			_, diags := Parse("t.hcl", []byte(src), nil)
			got = nil
			for _, d := range diags {
				got = append(got, d.String())
			}
			var want []string
			for _, w := range tc.want {
				want = append(want, shiftLine(w, -1))
			}
			if !slices.Equal(got, want) {
				t.Errorf("job level:\n got %q\nwant %q", got, want)
			}
		})
	}
}

// shiftLine moves "t.hcl:L:C: ..." by delta lines.
func shiftLine(diag string, delta int) string {
	rest, ok := strings.CutPrefix(diag, "t.hcl:")
	if !ok {
		return diag
	}
	line, tail, _ := strings.Cut(rest, ":")
	n, err := strconv.Atoi(line)
	if err != nil {
		return diag
	}
	return "t.hcl:" + strconv.Itoa(n+delta) + ":" + tail
}

// Jobs submitted as JSON get the same rules, with paths for positions.
func TestValidateSpreadJSON(t *testing.T) {
	w := 0
	job := &structs.Job{ID: "j", Name: "j", Type: "service",
		Spreads: []*structs.Spread{{Attribute: "${node.datacenter}", Weight: &w,
			SpreadTarget: []*structs.SpreadTarget{{Value: "dc1", Percent: 70}, {Value: "dc2", Percent: 40}}}},
		TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 1, Spreads: []*structs.Spread{{}},
			Tasks: []*structs.Task{{Name: "t", Driver: "exec", Config: map[string]any{"command": "x"}}}}}}
	_, err := Validate(job)
	if err == nil {
		t.Fatal("invalid spreads accepted")
	}
	for _, want := range []string{
		"spread[0]: Invalid spread weight; Weight 0 is out of range 1-100.",
		"spread[0]: Invalid spread targets; The target percents add up to 110%; they must not exceed 100%.",
		`group "g": spread[0]: Missing spread attribute;`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
