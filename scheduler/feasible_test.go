package scheduler

import (
	"errors"
	"reflect"
	"testing"

	"github.com/meshlet/meshlet/structs"
)

func TestParsePortSpec(t *testing.T) {
	got, err := ParsePortSpec(" 22, 80,8000-8100,,4646")
	want := []PortRange{{22, 22}, {80, 80}, {8000, 8100}, {4646, 4646}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ParsePortSpec = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"0", "65536", "x", "90-80", "1-2-3", "-5", "80-"} {
		if _, err := ParsePortSpec(bad); !errors.Is(err, ErrInvalidPortSpec) {
			t.Errorf("ParsePortSpec(%q) = %v, want ErrInvalidPortSpec", bad, err)
		}
	}
}

// A static port on one of the node's reserved ports (the agent's own
// listeners, reserved_ports) or an invalid static port filters the node
// with Nomad's reason, in host and bridge mode alike.
func TestFeasibleReservedPorts(t *testing.T) {
	n := &structs.Node{ID: "n1", Name: "n1", Status: structs.NodeStatusReady,
		Attributes: map[string]string{ReservedPortsAttribute: "22,4646,8500,8502,9000-9010"},
		Drivers:    map[string]*structs.DriverInfo{"raw_exec": {Detected: true, Healthy: true}}}
	for _, tc := range []struct {
		mode string
		port int
		want string
	}{
		{"host", 4646, "network: reserved port collision http=4646 on node n1"},
		{"bridge", 8500, "network: reserved port collision http=8500 on node n1"},
		{"bridge", 9005, "network: reserved port collision http=9005 on node n1"},
		{"host", 0, "network: invalid static port http=0 (a static port must be 1-65535; omit static for a dynamic port)"},
		{"bridge", 70000, "network: invalid static port http=70000 (a static port must be 1-65535; omit static for a dynamic port)"},
		{"host", 9011, ""},
		{"bridge", 8080, ""},
	} {
		job := &structs.Job{ID: "j", TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 1,
			Networks: []*structs.NetworkResource{{Mode: tc.mode, ReservedPorts: []structs.Port{{Label: "http", Value: tc.port}}}},
			Tasks:    []*structs.Task{{Name: "t", Driver: "raw_exec"}}}}}
		if got := feasible(job, job.TaskGroups[0], n); got != tc.want {
			t.Errorf("%s static %d: %q, want %q", tc.mode, tc.port, got, tc.want)
		}
	}
}

// The ordering operators and set_contains_any, which the jobspec accepts,
// are enforced as Nomad's: numbers compare as numbers, other values
// lexically; a node without the attribute does not satisfy them.
func TestConstraintOrderAndSetContainsAny(t *testing.T) {
	n := &structs.Node{ID: "n1", Name: "n1", Attributes: map[string]string{"cpu.numcores": "10",
		"cpu.frequency": "2.5", "os.version": "22.04", "driver.versions": "a,b, c"}}
	for _, tc := range []struct {
		attr, op, value string
		ok              bool
	}{
		{"${attr.cpu.numcores}", ">=", "2", true}, // 10 >= 2 as numbers ("10" < "2" as text)
		{"${attr.cpu.numcores}", ">", "10", false},
		{"${attr.cpu.numcores}", "<=", "10", true},
		{"${attr.cpu.numcores}", "<", "9", false},
		{"${attr.cpu.numcores}", "<", "10", false}, // strict: equal is not less
		{"${attr.cpu.frequency}", ">", "2.25", true},
		{"${attr.os.version}", "<", "22.10", true},
		{"${attr.os.version}", ">", "abc", false}, // not both numbers: lexical
		{"${attr.missing}", "<", "5", false},
		{"${attr.driver.versions}", "set_contains_any", "x,c", true},
		{"${attr.driver.versions}", "set_contains_any", "x,y", false},
		{"${attr.missing}", "set_contains_any", "a", false},
	} {
		got := checkConstraint(&structs.Constraint{LTarget: tc.attr, Operand: tc.op, RTarget: tc.value}, n)
		if (got == "") != tc.ok {
			t.Errorf("%s %s %s: %q, want satisfied=%v", tc.attr, tc.op, tc.value, got, tc.ok)
		}
	}
}
