package scheduler

import (
	"cmp"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/meshlet/meshlet/internal/versioncheck"
	"github.com/meshlet/meshlet/structs"
)

// Reasons for nodes that take no new allocations whatever the job, as
// keys of Failure.Filtered.
const (
	ReasonNodeNotReady   = "node not ready"
	ReasonNodeIneligible = "node ineligible"
	ReasonNodeDraining   = "node draining"
)

// feasible returns "" when node can run the group, else the reason it
// cannot. The rules that depend on other allocations (distinct_hosts,
// distinct_property, ports in use, cpu and memory) are the placer's.
func feasible(job *structs.Job, tg *structs.TaskGroup, n *structs.Node) string {
	switch {
	case !n.Ready():
		return ReasonNodeNotReady
	case n.Draining():
		return ReasonNodeDraining
	case !n.Eligible():
		return ReasonNodeIneligible
	}
	if !datacenterMatch(job.Datacenters, n.Datacenter) {
		return fmt.Sprintf("node %s is in datacenter %q, job wants %v", n.Name, n.Datacenter, job.Datacenters)
	}
	for _, t := range tg.Tasks {
		info := n.Drivers[t.Driver]
		switch {
		case info == nil || !info.Detected:
			msg := fmt.Sprintf("driver %s not available on node %s", t.Driver, n.Name)
			if info != nil && info.HealthDescription != "" { // e.g. raw_exec "disabled; enable it with ..."
				msg += ": " + info.HealthDescription
			}
			return msg
		case !info.Healthy:
			msg := fmt.Sprintf("driver %s unhealthy on node %s", t.Driver, n.Name)
			if info.HealthDescription != "" {
				msg += ": " + info.HealthDescription
			}
			return msg
		}
	}
	if r := portsFeasible(tg, n); r != "" {
		return r
	}
	var cons []*structs.Constraint
	cons = append(cons, job.Constraints...)
	cons = append(cons, tg.Constraints...)
	for _, t := range tg.Tasks {
		cons = append(cons, t.Constraints...)
	}
	for _, c := range cons {
		if r := checkConstraint(c, n); r != "" {
			return r
		}
	}
	return ""
}

// jobRulesHold reports whether node n satisfies the job-level placement
// rules: its datacenters and constraints (distinct ones aside).
func jobRulesHold(job *structs.Job, n *structs.Node) bool {
	if !datacenterMatch(job.Datacenters, n.Datacenter) {
		return false
	}
	for _, c := range job.Constraints {
		if c != nil && checkConstraint(c, n) != "" {
			return false
		}
	}
	return true
}

func datacenterMatch(want []string, dc string) bool {
	if len(want) == 0 {
		return true
	}
	for _, w := range want {
		if ok, _ := path.Match(w, dc); ok {
			return true
		}
	}
	return false
}

// resolveTarget expands "${attr.x}", "${meta.x}", "${node.unique.id}",
// "${node.unique.name}", "${node.datacenter}", "${node.class}"; anything
// else is literal.
func resolveTarget(target string, n *structs.Node) (string, bool) {
	if !strings.HasPrefix(target, "${") || !strings.HasSuffix(target, "}") {
		return target, true
	}
	key := target[2 : len(target)-1]
	switch {
	case strings.HasPrefix(key, "attr."):
		v, ok := n.Attributes[strings.TrimPrefix(key, "attr.")]
		return v, ok
	case strings.HasPrefix(key, "meta."):
		v, ok := n.Meta[strings.TrimPrefix(key, "meta.")]
		return v, ok
	case key == "node.unique.id":
		return n.ID, true
	case key == "node.unique.name":
		return n.Name, true
	case key == "node.datacenter":
		return n.Datacenter, true
	case key == "node.class":
		return n.NodeClass, n.NodeClass != ""
	}
	return "", false
}

// checkConstraint evaluates Nomad's constraint operators; an unknown one
// fails placement with a reason naming it.
func checkConstraint(c *structs.Constraint, n *structs.Node) string {
	l, lok := resolveTarget(c.LTarget, n)
	r, _ := resolveTarget(c.RTarget, n)
	ok := false
	switch c.Operand {
	case "", "=", "==", "is":
		ok = lok && l == r
	case "!=", "not":
		ok = !lok || l != r
	case "is_set":
		ok = lok
	case "is_not_set":
		ok = !lok
	case "regexp":
		re, err := regexp.Compile(r)
		if err != nil {
			return fmt.Sprintf("constraint %s regexp %q is invalid: %v", c.LTarget, r, err)
		}
		ok = lok && re.MatchString(l)
	case "set_contains", "set_contains_all":
		ok = lok && setContains(l, r)
	case "set_contains_any":
		ok = lok && setContainsAny(l, r)
	case "<", "<=", ">", ">=":
		ok = lok && checkOrder(c.Operand, l, r)
	case versioncheck.OpVersion, versioncheck.OpSemver:
		var err error
		if ok, err = versioncheck.Check(c.Operand, l, r); err != nil {
			return fmt.Sprintf("constraint %s %s %q is invalid: %v", c.LTarget, c.Operand, r, err)
		}
		ok = ok && lok
	case ConstraintDistinctHosts, ConstraintDistinctProperty:
		ok = true // depend on other allocations: the placer checks them
	default:
		return fmt.Sprintf("constraint operator %q is not supported by meshlet yet", c.Operand)
	}
	if !ok {
		return fmt.Sprintf("constraint %s %s %s not satisfied on node %s", c.LTarget, opName(c.Operand), c.RTarget, n.Name)
	}
	return ""
}

func opName(op string) string {
	if op == "" {
		return "="
	}
	return op
}

func setContains(have, want string) bool {
	set := map[string]bool{}
	for _, s := range strings.Split(have, ",") {
		set[strings.TrimSpace(s)] = true
	}
	for _, s := range strings.Split(want, ",") {
		if !set[strings.TrimSpace(s)] {
			return false
		}
	}
	return true
}

func setContainsAny(have, want string) bool {
	for _, s := range strings.Split(want, ",") {
		if setContains(have, s) {
			return true
		}
	}
	return false
}

// checkOrder compares l to r as Nomad's ordering operators: as numbers
// when both are, else lexically.
func checkOrder(op, l, r string) bool {
	c := strings.Compare(l, r)
	lf, err1 := strconv.ParseFloat(l, 64)
	rf, err2 := strconv.ParseFloat(r, 64)
	if err1 == nil && err2 == nil {
		c = cmp.Compare(lf, rf)
	}
	switch op {
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	}
	return c >= 0
}

// ReservedPortsAttribute is the node attribute listing the host ports no
// job may take ("22,4646,8000-8100"): the agent's own listeners and the
// client's reserved { reserved_ports } option.
const ReservedPortsAttribute = "meshlet.reserved_ports"

// nodeIPAttribute is the node attribute holding its advertised address,
// written as the host IP of the port mappings placed on it.
const nodeIPAttribute = "unique.network.ip-address"

// ErrInvalidPortSpec is returned by ParsePortSpec.
var ErrInvalidPortSpec = errors.New("invalid port list")

// PortRange is an inclusive range of ports.
type PortRange struct{ Lo, Hi int }

// ParsePortSpec parses Nomad's reserved_ports syntax: comma-separated ports
// and inclusive ranges ("22,80,8000-8100"), each within 1-65535. An empty
// spec is no port.
func ParsePortSpec(spec string) ([]PortRange, error) {
	var out []PortRange
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		l, err1 := strconv.Atoi(strings.TrimSpace(lo))
		h, err2 := strconv.Atoi(strings.TrimSpace(hi))
		if err1 != nil || err2 != nil || l < 1 || h > 65535 || l > h {
			return nil, fmt.Errorf("%w: %q is not a port (1-65535) or a range lo-hi", ErrInvalidPortSpec, part)
		}
		out = append(out, PortRange{Lo: l, Hi: h})
	}
	return out, nil
}

// reservedPorts returns the node's reserved ports. An unparsable attribute
// reserves nothing more (the agent validated it).
func reservedPorts(n *structs.Node) []PortRange {
	ranges, _ := ParsePortSpec(n.Attributes[ReservedPortsAttribute])
	return ranges
}

// inRanges reports whether port lies in one of ranges.
func inRanges(ranges []PortRange, port int) bool {
	for _, r := range ranges {
		if port >= r.Lo && port <= r.Hi {
			return true
		}
	}
	return false
}

// portsFeasible refuses a group whose static ports are invalid or collide
// with the node's reserved ports, in Nomad's words.
func portsFeasible(tg *structs.TaskGroup, n *structs.Node) string {
	reserved := reservedPorts(n)
	for _, net := range tg.Networks {
		for _, p := range net.ReservedPorts {
			switch {
			case p.Value < 1 || p.Value > 65535:
				return fmt.Sprintf("network: invalid static port %s=%d (a static port must be 1-65535; omit static for a dynamic port)", p.Label, p.Value)
			case inRanges(reserved, p.Value):
				return fmt.Sprintf("network: reserved port collision %s=%d on node %s", p.Label, p.Value, n.Name)
			}
		}
	}
	return ""
}
