package bench

import (
	"fmt"
	"time"
)

// perThousandMiB is the memory added per 1,000 allocations, in MiB.
func perThousandMiB(idle, loaded int64, allocs int) float64 {
	if allocs <= 0 {
		return 0
	}
	return float64(loaded-idle) / (1 << 20) * 1000 / float64(allocs)
}

// perSecond is n events over d as a rate; 0 for no time.
func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// phaseValue returns get(p) when p measured it (err nil), else nil.
func phaseValue(p *clusterPhase, err error, get func(*clusterPhase) float64) *float64 {
	if p == nil || err != nil {
		return nil
	}
	return ptr(get(p))
}

// baseNote is detail() when the baseline was measured, else why not.
func baseNote(err error, detail func() string) string {
	if err != nil {
		return " (not measured: " + err.Error() + ")"
	}
	return detail()
}

func clusterFigures(many, base *clusterPhase) []*Figure {
	return []*Figure{placeFigure(many, base), planFigure(many, base), deathFigure(many), rssFigure(many, base), hbFigure(many, base)}
}

func placeFigure(many, base *clusterPhase) *Figure {
	name := fmt.Sprintf("%d allocations over %d nodes → all running: allocations placed per second", clusterAllocs, clusterNodes)
	if many.placeErr != nil {
		return NotMeasured(name, "allocs/s", many.placeErr.Error(), nil)
	}
	rate := func(p *clusterPhase) float64 { return perSecond(clusterAllocs, p.place) }
	f := Measured(name, "allocs/s", rate(many), phaseValue(base, base.placeErr, rate), nil)
	f.Note = fmt.Sprintf("One job of %d groups × %d registered through the HTTP API, timed until its node reports the last "+
		"allocation running: %.2f s, in which the server used %.1f s of CPU and the simulated nodes %.1f s (same "+
		"2-core machine) and the nodes were woken %d times (NodeAllocs answers). Baseline: all %d on one node%s.",
		clusterGroups, clusterAllocs/clusterGroups, many.place.Seconds(), many.placeCPU, many.simCPU, many.placeFetches,
		clusterAllocs, baseNote(base.placeErr, func() string {
			return fmt.Sprintf(", %.2f s (server CPU %.1f s, %d wake-ups)", base.place.Seconds(), base.placeCPU, base.placeFetches)
		}))
	return f
}

func planFigure(many, base *clusterPhase) *Figure {
	name := fmt.Sprintf("plan commit latency, p99 (%d registrations of %d allocations)", planRegistration, planCount)
	if many.planErr != nil {
		return NotMeasured(name, "ms", many.planErr.Error(), nil)
	}
	p99 := func(p *clusterPhase) float64 { return ms(percentile(p.plan, 99)) }
	f := Measured(name, "ms", p99(many), phaseValue(base, base.planErr, p99), nil)
	f.Note = fmt.Sprintf("Registration is synchronous: the server schedules and commits the plan (one etcd transaction) "+
		"before it answers, so submit → answer is submit → evaluation complete. One job after another, each registered "+
		"once the previous one's allocations run, with the %d placement allocations in place; with %d samples p99 is "+
		"the slowest. p50 %.1f ms; evaluations not complete or with failed placements: %d; registration → the job's %d "+
		"allocations running: p50 %.2f s. Baseline: the same on one node%s.", clusterAllocs, planRegistration,
		ms(percentile(many.plan, 50)), many.planBad, planCount, percentile(many.planRun, 50).Seconds(),
		baseNote(base.planErr, func() string {
			return fmt.Sprintf(" (p50 %.1f ms; running after p50 %.2f s)", ms(percentile(base.plan, 50)), percentile(base.planRun, 50).Seconds())
		}))
	return f
}

func deathFigure(p *clusterPhase) *Figure {
	name := "client death → its allocations replaced and running"
	if p.deathErr != nil {
		return NotMeasured(name, "s", p.deathErr.Error(), nil)
	}
	f := Measured(name, "s", p.death.Seconds(), nil, nil)
	down := "not seen"
	if p.deathDown > 0 {
		down = fmt.Sprintf("%.2f s", p.deathDown.Seconds())
	}
	f.Note = fmt.Sprintf("One of %d nodes stops heartbeating and watching (connections closed) with %d allocations; "+
		"marked down after %s (TTL %s + grace 1 s from its last heartbeat, sent up to TTL/2 before), then "+
		"the %d replacements run on the others. No baseline: one node has nowhere to place replacements.",
		p.nodes, p.deathLost, down, p.ttl, p.deathLost)
	return f
}

func rssFigure(many, base *clusterPhase) *Figure {
	name := "server RSS per 1,000 allocations"
	if many.placeErr != nil || many.rss == 0 {
		return NotMeasured(name, "MiB", reason(many.placeErr, "the server's RSS could not be read"), nil)
	}
	rss := func(p *clusterPhase) float64 { return perThousandMiB(p.idleRSS, p.rss, clusterAllocs) }
	var b *float64
	if base.rss != 0 {
		b = phaseValue(base, base.placeErr, rss)
	}
	f := Measured(name, "MiB", rss(many), b, nil)
	f.Note = fmt.Sprintf("VmRSS once the %d allocations run minus before the job (%.0f → %.0f MiB), embedded etcd member "+
		"included (same process); no GC forced, so garbage of the placement counts. Baseline: all on one node.",
		clusterAllocs, float64(many.idleRSS)/(1<<20), float64(many.rss)/(1<<20))
	return f
}

func hbFigure(many, base *clusterPhase) *Figure {
	name := "heartbeats per second one server sustains"
	if many.hbErr != nil {
		return NotMeasured(name, "heartbeats/s", many.hbErr.Error(), nil)
	}
	hb := func(p *clusterPhase) float64 { return p.hbRate }
	f := Measured(name, "heartbeats/s", many.hbRate, phaseValue(base, base.hbErr, hb), nil)
	f.Note = fmt.Sprintf("%d callers, each with its own connection, heartbeat back to back for %s as the %d live nodes "+
		"(%d calls, %d errors); baseline: the same callers all as the one node. The nodes' own TTL was %s "+
		"(%d nodes need %.0f heartbeats/s).", hbWorkers, hbDuration, clusterNodes-1, many.hbCalls, many.hbErrors,
		many.ttl, clusterNodes, perSecond(2*clusterNodes, many.ttl))
	return f
}

// clusterFindings explains what the run showed beyond the figures.
func clusterFindings(many, base *clusterPhase) []string {
	var out []string
	for _, p := range []*clusterPhase{base, many} {
		if p.apiCheck != "" {
			out = append(out, fmt.Sprintf("%d node(s): %s", p.nodes, p.apiCheck))
		}
		if p.nodesDown > 0 {
			out = append(out, fmt.Sprintf("%d node(s): %d simulated nodes were down after the heartbeat load "+
				"(their own heartbeats were delayed past TTL + grace).", p.nodes, p.nodesDown))
		}
	}
	if many.placeErr == nil && base.placeErr == nil && many.placeFetches > 0 {
		per := float64(many.placeFetches) / float64(clusterNodes)
		msg := fmt.Sprintf("Placing %d allocations on %d nodes woke the nodes %d times (%.1f per node) against %d times on one node. ",
			clusterAllocs, clusterNodes, many.placeFetches, per, base.placeFetches)
		if per > 2 {
			msg += "Nodes are woken by changes that are not theirs: NodeAllocs should wake a node only for its own allocations."
		} else {
			msg += "Each node is woken about once, for its own allocations (NodeAllocs ignores other nodes' changes and running " +
				"status reports); the placement time is then the server's own work per plan."
		}
		out = append(out, msg)
	}
	return out
}
