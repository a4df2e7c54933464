package bench

import (
	"context"
	"fmt"
)

// measureArms runs the four data-plane blocks (fixed rate, max rate, new
// connections, bulk), each over every arm in rotated order for every
// round, and returns the per-round results.
func (r *Runner) measureArms(ctx context.Context, env *meshEnv, arms []dpArm) *dpRuns {
	fo := Fortio{Bin: r.opts.Fortio, Netns: env.client, Dir: r.scratch}
	runs := &dpRuns{rounds: r.roundCount(), arms: map[string]*armRuns{}}
	for _, a := range arms {
		runs.arms[a.Name()] = &armRuns{errs: map[string]error{}}
	}
	r.interleave(ctx, runs, "fixed rate", arms, func(a dpArm, res *armRuns) error {
		spec := LoadSpec{QPS: fixedRate, Conns: fixedConns, Duration: fixedDuration, KeepAlive: true, URL: a.HTTPURL()}
		var got FortioResult
		var errL error
		u, err := watch(a.Procs(loadHTTP), func() error { got, errL = fo.Run(ctx, spec); return errL })
		if errL != nil {
			return errL
		}
		if err != nil {
			// A process to watch is gone: measure latency anyway.
			if got, errL = fo.Run(ctx, spec); errL != nil {
				return errL
			}
			u = nil
		}
		res.fixed, res.usage = append(res.fixed, got), append(res.usage, u)
		return nil
	})
	r.interleave(ctx, runs, "max rate", arms, func(a dpArm, res *armRuns) error {
		got, err := fo.Run(ctx, LoadSpec{Conns: maxConns, Duration: maxDuration, KeepAlive: true, URL: a.HTTPURL()})
		res.maxRPS = append(res.maxRPS, got.ActualQPS)
		return err
	})
	r.interleave(ctx, runs, "new connections", arms, func(a dpArm, res *armRuns) error {
		got, err := fo.Run(ctx, LoadSpec{Conns: connConns, Duration: maxDuration, KeepAlive: false, URL: a.ConnURL()})
		res.conns = append(res.conns, got.ActualQPS)
		return err
	})
	r.interleave(ctx, runs, "bulk", arms, func(a dpArm, res *armRuns) error {
		host, port := a.BulkAddr()
		var bps float64
		var errL error
		u, err := watch(a.Procs(loadBulk), func() error {
			bps, errL = Iperf(ctx, r.opts.Iperf3, env.client, host, port, bulkDuration)
			return errL
		})
		if errL != nil {
			return errL
		}
		if err != nil {
			return fmt.Errorf("failed to watch the proxies during bulk: %w", err)
		}
		var cpu float64
		for _, s := range u {
			cpu += s.vcpu
		}
		res.gbps, res.bulkCPU = append(res.gbps, bps/1e9), append(res.bulkCPU, cpu)
		return nil
	})
	runs.waits = append(runs.waits, r.waitQuiet(ctx, "system calls"))
	runs.syscalls, runs.syscallErr = r.countSyscalls(ctx, fo, arms)
	return runs
}

// roundCount is how many rounds each block runs (Options.DataRounds, or
// dataPlaneRounds).
func (r *Runner) roundCount() int {
	if r.opts.DataRounds > 0 {
		return r.opts.DataRounds
	}
	return dataPlaneRounds
}

// watchedUsage is the per-process median of the rounds' usage, with
// ErrNoProcess when some round was not watched.
func watchedUsage(a *armRuns) (map[string]sidecarUsage, error) {
	var us []map[string]sidecarUsage
	for _, u := range a.usage {
		if u != nil {
			us = append(us, u)
		}
	}
	var err error
	if len(us) < len(a.fixed) {
		err = ErrNoProcess
	}
	return medianUsage(us), err
}
