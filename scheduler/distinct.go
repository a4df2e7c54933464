package scheduler

import (
	"fmt"
	"strconv"

	"github.com/meshlet/meshlet/structs"
)

// Constraint operators the placer enforces across nodes.
const (
	ConstraintDistinctHosts    = "distinct_hosts"
	ConstraintDistinctProperty = "distinct_property"
)

// rules are the cross-node rules of one group's placement: distinct_hosts,
// distinct_property and spread. They depend on where the job's other
// allocations are, so they are computed per placement from the placer.
type rules struct {
	tg *structs.TaskGroup
	// jobHosts: distinct_hosts at job level (no two allocations of the
	// job on a node); groupHosts: at group or task level (of the group).
	jobHosts, groupHosts bool
	props                []*distinctProp
	spreads              []*spreadRule
}

// distinctProp is a distinct_property constraint with the use of each
// value of its attribute.
type distinctProp struct {
	attr  string
	limit int
	// job: set at job level (counts every group of the job).
	job  bool
	used map[string]int
}

func (p *placer) groupRules(tg *structs.TaskGroup) *rules {
	r := &rules{tg: tg}
	addCons := func(cs []*structs.Constraint, job bool) {
		for _, c := range cs {
			switch {
			case c == nil:
			case c.Operand == ConstraintDistinctHosts && job:
				r.jobHosts = true
			case c.Operand == ConstraintDistinctHosts:
				r.groupHosts = true
			case c.Operand == ConstraintDistinctProperty:
				r.props = append(r.props, &distinctProp{attr: c.LTarget, limit: propertyLimit(c.RTarget), job: job, used: map[string]int{}})
			}
		}
	}
	addCons(p.job.Constraints, true)
	addCons(tg.Constraints, false)
	for _, t := range tg.Tasks {
		addCons(t.Constraints, false)
	}
	for _, dp := range r.props {
		p.eachAlloc(tg, dp.job, func(n *structs.Node) {
			if v, ok := resolveTarget(dp.attr, n); ok {
				dp.used[v]++
			}
		})
	}
	r.spreads = p.spreadRules(tg)
	return r
}

// propertyLimit parses distinct_property's value: the number of
// allocations allowed per value, default 1.
func propertyLimit(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// eachAlloc calls fn with the node of every live allocation of the job
// (whole job, or only group tg) whose node is known.
func (p *placer) eachAlloc(tg *structs.TaskGroup, wholeJob bool, fn func(*structs.Node)) {
	for nodeID, allocs := range p.live {
		n := p.byID[nodeID]
		if n == nil {
			continue
		}
		for _, a := range allocs {
			if a.JobID == p.job.ID && (wholeJob || a.TaskGroup == tg.Name) {
				fn(n)
			}
		}
	}
}

// distinct returns the reason node n breaks distinct_hosts or
// distinct_property, in Nomad's words, or "".
func (r *rules) distinct(p *placer, n *structs.Node) string {
	if r.jobHosts || r.groupHosts {
		for _, a := range p.live[n.ID] {
			if a.JobID == p.job.ID && (r.jobHosts || a.TaskGroup == r.tg.Name) {
				return ConstraintDistinctHosts
			}
		}
	}
	for _, dp := range r.props {
		v, ok := resolveTarget(dp.attr, n)
		if !ok {
			return fmt.Sprintf("missing property %q", dp.attr)
		}
		if used := dp.used[v]; used >= dp.limit {
			return fmt.Sprintf("%s: %s=%s used by %d allocs", ConstraintDistinctProperty, dp.attr, v, used)
		}
	}
	return ""
}

// collisions counts the group's live allocations on n (job anti-affinity).
func (r *rules) collisions(p *placer, n *structs.Node) int {
	c := 0
	for _, a := range p.live[n.ID] {
		if a.JobID == p.job.ID && a.TaskGroup == r.tg.Name {
			c++
		}
	}
	return c
}
