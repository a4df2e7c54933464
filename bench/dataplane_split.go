package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// syscallDuration is the fixed-rate load each arm runs while perf counts
// its proxies' system calls (once, after the measured blocks: counting
// adds a little work to every system call).
const syscallDuration = 5 * time.Second

// proxyRoles are the processes whose cost per request the split compares.
var proxyRoles = []string{"client sidecar", "server sidecar"}

// errNoPerf marks a run without perf: no system-call counts.
var errNoPerf = errors.New("perf is not installed (Debian: linux-perf)")

// countSyscalls runs the fixed rate once more through every arm that has
// proxies, with perf counting each proxy's system calls, and returns them
// per request by arm and role.
func (r *Runner) countSyscalls(ctx context.Context, fo Fortio, arms []dpArm) (map[string]map[string]float64, error) {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return nil, errNoPerf
	}
	out := map[string]map[string]float64{}
	for _, a := range arms {
		procs := a.Procs(loadHTTP)
		if len(procs) == 0 {
			continue
		}
		perArm, err := r.countArm(ctx, perf, fo, a, procs)
		if err != nil {
			return out, fmt.Errorf("%s: %w", a.Name(), err)
		}
		out[a.Name()] = perArm
	}
	return out, nil
}

// countArm counts one arm's proxies' system calls over one fixed-rate
// load.
func (r *Runner) countArm(ctx context.Context, perf string, fo Fortio, a dpArm, procs map[string]int) (map[string]float64, error) {
	type counter struct {
		cmd    *exec.Cmd
		stderr bytes.Buffer
	}
	counters := map[string]*counter{}
	defer func() {
		for _, c := range counters {
			if c.cmd.ProcessState == nil {
				_ = c.cmd.Process.Kill()
				_ = c.cmd.Wait()
			}
		}
	}()
	for _, role := range proxyRoles {
		pid, ok := procs[role]
		if !ok {
			continue
		}
		c := &counter{cmd: exec.CommandContext(ctx, perf, "stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "-p", strconv.Itoa(pid))}
		c.cmd.Stderr = &c.stderr
		if err := c.cmd.Start(); err != nil {
			return nil, fmt.Errorf("failed to start perf: %w", err)
		}
		counters[role] = c
	}
	time.Sleep(300 * time.Millisecond) // perf attaches
	got, err := fo.Run(ctx, LoadSpec{QPS: fixedRate, Conns: fixedConns, Duration: syscallDuration, KeepAlive: true, URL: a.HTTPURL()})
	if err != nil {
		return nil, err
	}
	if got.Count <= 0 {
		return nil, fmt.Errorf("fortio counted no requests")
	}
	out := map[string]float64{}
	for role, c := range counters {
		_ = c.cmd.Process.Signal(syscall.SIGINT)
		if err := c.cmd.Wait(); err != nil && c.stderr.Len() == 0 {
			return nil, fmt.Errorf("perf stat for the %s: %w", role, err)
		}
		n, err := parsePerfCount(c.stderr.String(), "raw_syscalls:sys_enter")
		if err != nil {
			return nil, fmt.Errorf("perf stat for the %s: %w", role, err)
		}
		out[role] = float64(n) / float64(got.Count)
	}
	return out, nil
}

// parsePerfCount reads event's count from perf stat's CSV output (-x ,).
func parsePerfCount(out, event string) (int64, error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 || f[2] != event {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("event %s not counted: %q", event, f[0])
		}
		return n, nil
	}
	return 0, fmt.Errorf("no %s count in perf's output: %s", event, lastLines(out, 2, nil))
}

// proxyCost is one proxy's cost per request at the fixed rate.
type proxyCost struct {
	user, sys, switches, syscalls float64 // µs, µs, per request
	hasSyscalls                   bool
}

// splitFinding sets each arm's proxies side by side at the fixed rate:
// CPU per request in the process's own code and in the kernel, context
// switches and (with perf) system calls per request, and how meshlet's
// sidecars differ from the better peer in each part.
func splitFinding(runs *dpRuns) string {
	costs := map[string]map[string]proxyCost{}
	for name, a := range runs.arms {
		usage, err := watchedUsage(a)
		qps := medianFortio(a.fixed).ActualQPS
		if err != nil || qps <= 0 {
			continue
		}
		for _, role := range proxyRoles {
			u, ok := usage[role]
			if !ok || u.err != nil {
				continue
			}
			c := proxyCost{user: u.user / qps * 1e6, sys: u.sys / qps * 1e6, switches: u.switches / qps}
			c.syscalls, c.hasSyscalls = runs.syscalls[name][role]
			if costs[name] == nil {
				costs[name] = map[string]proxyCost{}
			}
			costs[name][role] = c
		}
	}
	if len(costs[armMeshlet]) == 0 {
		return ""
	}
	var parts []string
	for _, name := range append([]string{armMeshlet}, peerNames...) {
		for _, role := range proxyRoles {
			if c, ok := costs[name][role]; ok {
				parts = append(parts, fmt.Sprintf("%s %s %s", name, role, c.describe()))
			}
		}
	}
	s := "Where each proxy's CPU per request goes at 1,000 rps (median of the fixed-rate rounds; user = the proxy's own code, " +
		"kernel = system calls and faults on its behalf, from /proc/<pid>/stat; context switches of all its threads; system " +
		"calls counted by perf in one more run per arm): " + strings.Join(parts, "; ") + "."
	if d := meshletVsBestPeer(costs); d != "" {
		s += " " + d
	}
	if runs.syscallErr != nil {
		s += fmt.Sprintf(" System calls not counted: %v.", runs.syscallErr)
	}
	return s
}

func (c proxyCost) describe() string {
	s := fmt.Sprintf("%.1f µs user + %.1f µs kernel, %.1f context switches", c.user, c.sys, c.switches)
	if c.hasSyscalls {
		s += fmt.Sprintf(", %.1f system calls", c.syscalls)
	}
	return s
}

// meshletVsBestPeer says, per role, how far meshlet's sidecar is from the
// peer with the least CPU per request, in user space and in the kernel.
func meshletVsBestPeer(costs map[string]map[string]proxyCost) string {
	var parts []string
	for _, role := range proxyRoles {
		m, ok := costs[armMeshlet][role]
		if !ok {
			continue
		}
		best, bestName := proxyCost{}, ""
		for _, p := range peerNames {
			c, ok := costs[p][role]
			if ok && (bestName == "" || c.user+c.sys < best.user+best.sys) {
				best, bestName = c, p
			}
		}
		if bestName == "" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %+.1f µs against %s (user %+.1f, kernel %+.1f)",
			role, m.user+m.sys-best.user-best.sys, bestName, m.user-best.user, m.sys-best.sys))
	}
	if len(parts) == 0 {
		return ""
	}
	return "meshlet's CPU per request against the better peer: " + strings.Join(parts, "; ") + "."
}

// memoryFloorFinding compares the sidecars' private memory with the floor
// of any process of the meshlet executable: an idle task executor of the
// same agent (the same binary, its start-up garbage returned to the OS).
func memoryFloorFinding(env *meshEnv, figs []*Figure) string {
	anon, err := executorsAnon(env.ag.PID())
	if err != nil {
		return ""
	}
	floor := median(anon) / 1e6
	var parts []string
	for _, f := range figs {
		if f.Value != nil && strings.HasSuffix(f.Name, "private memory (RssAnon) at 1,000 rps (baseline: server app)") {
			side, _, _ := strings.Cut(f.Name, " private memory")
			parts = append(parts, fmt.Sprintf("%s %.1f MB = %.1f + %.1f MB", side, *f.Value, floor, *f.Value-floor))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("Private memory floor: an idle process of the meshlet executable (this agent's task executors, median of %d, "+
		"after returning their start-up garbage) holds %.1f MB RssAnon: what the package initialisation of the one binary keeps "+
		"(the Envoy API's protobuf descriptors, regular expressions, registries), which every meshlet process pays. The sidecars "+
		"at 1,000 rps: %s of the proxy's own (configuration, connections, buffers and the collector's headroom). Against the "+
		"≤ 8 MB target that leaves %.1f MB above the floor.", len(anon), floor, strings.Join(parts, ", "), 8-floor)
}
