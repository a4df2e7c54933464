package scheduler

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

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

// The version and semver operators are Nomad's, evaluated against node
// attributes as a fingerprinted node carries them: version uses go-version
// constraints, where a pre-release such as a distribution kernel's
// "5.15.0-91-generic" satisfies no ordering constraint without a
// pre-release; semver orders it by Semantic Versioning, so it does satisfy
// ">= 5.4". Build metadata is ignored by both.
func TestConstraintVersionAndSemver(t *testing.T) {
	n := &structs.Node{ID: "n1", Name: "n1", Attributes: map[string]string{
		"kernel.version": "5.15.0-91-generic", "nomad.version": "1.9.0", "meshlet.version": "0.1.0",
		"rpi.kernel": "6.6.31+rpt-rpi-v8", "driver.docker.version": "28.5.2", "unique.hostname": "web-1"}}
	for _, tc := range []struct {
		attr, op, value string
		ok              bool
	}{
		{"${attr.nomad.version}", "version", ">= 1.6", true},
		{"${attr.nomad.version}", "version", ">= 1.6, < 1.9", false},
		{"${attr.nomad.version}", "version", "~> 1.9.0", true},
		{"${attr.nomad.version}", "version", "~> 1.8.0", false},
		{"${attr.meshlet.version}", "version", "< 1.0", true},
		{"${attr.driver.docker.version}", "version", "> 20.10", true}, // as versions: "28.5.2" > "20.10"
		{"${attr.kernel.version}", "version", ">= 5.4", false},        // a pre-release: Nomad's go-version rule
		{"${attr.kernel.version}", "version", ">= 5.15.0-1", true},    // same base, pre-release constraint
		{"${attr.kernel.version}", "version", "= 5.15.0-91-generic", true},
		{"${attr.rpi.kernel}", "version", ">= 5.4", true}, // "+..." is metadata, not a pre-release
		{"${attr.rpi.kernel}", "version", "= 6.6.31", true},
		{"${attr.unique.hostname}", "version", ">= 1.0", false}, // not a version
		{"${attr.missing}", "version", ">= 1.0", false},
		{"${attr.kernel.version}", "semver", ">= 5.4", true},
		{"${attr.kernel.version}", "semver", ">= 5.4, < 6", true},
		{"${attr.kernel.version}", "semver", ">= 5.15.0", false}, // a pre-release orders below its release
		{"${attr.kernel.version}", "semver", "> 5.15.0-9-generic", true},
		{"${attr.kernel.version}", "semver", "5.15.0-91-generic", true}, // no operator is "="
		{"${attr.kernel.version}", "semver", "!= 5.15.0", true},
		{"${attr.nomad.version}", "semver", "< 1.10", true},  // numerically, not lexically
		{"${attr.nomad.version}", "semver", "~> 1.9", false}, // no pessimistic operator
		{"${attr.rpi.kernel}", "semver", "= 6.6.31", true},
		{"${attr.missing}", "semver", ">= 1.0", false},
	} {
		c := &structs.Constraint{LTarget: tc.attr, Operand: tc.op, RTarget: tc.value}
		if got := checkConstraint(c, n); (got == "") != tc.ok {
			t.Errorf("%s %s %q: %q, want satisfied=%v", tc.attr, tc.op, tc.value, got, tc.ok)
		}
	}
}

// A version or semver constraint that does not parse fails placement with
// a reason naming it, as an invalid regexp does.
func TestConstraintVersionInvalid(t *testing.T) {
	n := &structs.Node{ID: "n1", Name: "n1", Attributes: map[string]string{"nomad.version": "1.9.0"}}
	for _, tc := range []struct{ op, value, want string }{
		{"version", ">== 1.0", `constraint ${attr.nomad.version} version ">== 1.0" is invalid: invalid version constraint: `},
		{"semver", "~> 1.9", `constraint ${attr.nomad.version} semver "~> 1.9" is invalid: invalid version constraint: "~> 1.9": `},
		{"semver", ">= 1.0.", `constraint ${attr.nomad.version} semver ">= 1.0." is invalid: invalid version constraint: ">= 1.0.": `},
		{"semver", "", `constraint ${attr.nomad.version} semver "" is invalid: invalid version constraint: "": `},
	} {
		got := checkConstraint(&structs.Constraint{LTarget: "${attr.nomad.version}", Operand: tc.op, RTarget: tc.value}, n)
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s %q: %q, want prefix %q", tc.op, tc.value, got, tc.want)
		}
	}
}

// A group constrained on the kernel version is placed only on the nodes
// whose fingerprinted kernel.version satisfies it, including this host's
// own uname release, and the others are reported as filtered.
func TestPlacementByKernelVersion(t *testing.T) {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	kernel := func(v string) func(*structs.Node) {
		return func(n *structs.Node) { n.Attributes["kernel.version"] = v }
	}
	nodes := []*structs.Node{cnode("old", "dc1", 4000, 8192, kernel("4.19.0-26-amd64")),
		cnode("new", "dc1", 4000, 8192, kernel("5.15.0-91-generic")),
		cnode("host", "dc1", 4000, 8192, kernel(unix.ByteSliceToString(uts.Release[:])))}
	s := newTest(t, 20000, 20100)
	j := job("a", 3, withCons(true, &structs.Constraint{LTarget: "${attr.kernel.version}", Operand: "semver", RTarget: ">= 4.20"}),
		withCons(false, distinctHosts))
	p, err := s.Process(j, nil, nodes, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := perNode(p.Place); got != "host=1,new=1" {
		t.Errorf("placed %s, want host=1,new=1 (this host's kernel %q)", got, nodes[2].Attributes["kernel.version"])
	}
	want := `1 failed: filtered "constraint ${attr.kernel.version} semver >= 4.20 not satisfied on node old"=1, filtered "distinct_hosts"=2`
	if got := failureOf(p); got != want {
		t.Errorf("failure %s, want %s", got, want)
	}
}
