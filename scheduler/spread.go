package scheduler

import "github.com/meshlet/meshlet/structs"

// DefaultSpreadWeight is the weight of a spread block that sets none.
const DefaultSpreadWeight = 50

// implicitTarget holds the share the targets leave to unlisted values.
const implicitTarget = "*"

// spreadRule is one spread block of the job or group, with the group's
// current use of each value of its attribute.
type spreadRule struct {
	attr string
	// weight is this spread's weight over the sum of all spread weights.
	weight float64
	// desired is the wanted allocation count per value (targets); nil for
	// an even spread.
	desired map[string]float64
	used    map[string]int
}

// spreadRules builds the job's and the group's spread blocks, as Nomad's
// SpreadIterator: desired counts are the target percents of the group's
// count, and what the targets leave goes to the unlisted values.
func (p *placer) spreadRules(tg *structs.TaskGroup) []*spreadRule {
	var blocks []*structs.Spread
	for _, s := range append(append([]*structs.Spread(nil), p.job.Spreads...), tg.Spreads...) {
		if s != nil && s.Attribute != "" {
			blocks = append(blocks, s)
		}
	}
	if len(blocks) == 0 {
		return nil
	}
	weightOf := func(s *structs.Spread) int {
		if s.Weight == nil {
			return DefaultSpreadWeight
		}
		return max(*s.Weight, 0)
	}
	sum := 0
	for _, s := range blocks {
		sum += weightOf(s)
	}
	var out []*spreadRule
	for _, s := range blocks {
		sr := &spreadRule{attr: s.Attribute, used: map[string]int{}}
		if sum > 0 {
			sr.weight = float64(weightOf(s)) / float64(sum)
		}
		if len(s.SpreadTarget) > 0 {
			sr.desired = map[string]float64{}
			pct := 0
			for _, t := range s.SpreadTarget {
				if t != nil {
					sr.desired[t.Value] = float64(t.Percent) / 100 * float64(tg.Count)
					pct += t.Percent
				}
			}
			if pct < 100 {
				sr.desired[implicitTarget] = float64(100-pct) / 100 * float64(tg.Count)
			}
		}
		p.eachAlloc(tg, false, func(n *structs.Node) {
			if v, ok := resolveTarget(sr.attr, n); ok {
				sr.used[v]++
			}
		})
		out = append(out, sr)
	}
	return out
}

// spreadScore is Nomad's total spread score of node n: per spread, with
// targets, (desired - used after placement) / desired × weight; without,
// the even-spread boost. A node missing the attribute, or whose value has
// no share, scores -1 for that spread.
func (r *rules) spreadScore(n *structs.Node) float64 {
	total := 0.0
	for _, sr := range r.spreads {
		v, ok := resolveTarget(sr.attr, n)
		if !ok {
			total--
			continue
		}
		if sr.desired == nil {
			total += evenSpreadBoost(sr.used, v)
			continue
		}
		desired, ok := sr.desired[v]
		if !ok {
			desired, ok = sr.desired[implicitTarget]
		}
		if !ok || desired <= 0 {
			total--
			continue
		}
		total += (desired - float64(sr.used[v]+1)) / desired * sr.weight
	}
	return total
}

// evenSpreadBoost is Nomad's boost for a spread without targets: values
// with fewer allocations than the others are boosted, the most used ones
// penalized, and an even distribution scores -1 everywhere.
func evenSpreadBoost(used map[string]int, v string) float64 {
	if len(used) == 0 {
		return 0
	}
	cur := used[v]
	lo, hi := 0, 0
	for _, c := range used {
		if lo == 0 || c < lo {
			lo = c
		}
		hi = max(hi, c)
	}
	switch {
	case cur != lo:
		return float64(lo-cur) / float64(lo)
	case lo == hi:
		return -1
	}
	return float64(hi-lo) / float64(lo)
}
