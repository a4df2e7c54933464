package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// cpuTicks is the machine-wide CPU time from /proc/stat's "cpu" line,
// in clock ticks (USER_HZ, 100 on Linux).
type cpuTicks struct {
	user, kernel, idle uint64
	at                 time.Time
}

// userHZ is the unit of /proc/stat.
const userHZ = 100

// readCPUTicks reads /proc/stat: user = user + nice, kernel = system +
// irq + softirq, idle = idle + iowait (steal and guest are left out).
func readCPUTicks() (cpuTicks, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTicks{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return cpuTicks{}, fmt.Errorf("unexpected /proc/stat line %q", line)
	}
	var v [7]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return cpuTicks{}, fmt.Errorf("unexpected /proc/stat line %q: %w", line, err)
		}
	}
	return cpuTicks{user: v[0] + v[1], kernel: v[2] + v[5] + v[6], idle: v[3] + v[4], at: time.Now()}, nil
}

// cpuUse is what the machine's CPUs did between two samples.
type cpuUse struct {
	User, Kernel, Idle time.Duration
	Wall               time.Duration
}

func (a cpuTicks) until(b cpuTicks) cpuUse {
	d := func(x, y uint64) time.Duration { return time.Duration(y-x) * time.Second / userHZ }
	return cpuUse{User: d(a.user, b.user), Kernel: d(a.kernel, b.kernel), Idle: d(a.idle, b.idle), Wall: b.at.Sub(a.at)}
}

// Busy is the CPU time spent, user and kernel.
func (u cpuUse) Busy() time.Duration { return u.User + u.Kernel }

// String describes the use, e.g. "9.1 CPU-s busy (62 % in the kernel)
// over 5.4 s, 84 % of 2 CPUs".
func (u cpuUse) String(cores int) string {
	busy := u.Busy().Seconds()
	kernel, util := 0.0, 0.0
	if busy > 0 {
		kernel = 100 * u.Kernel.Seconds() / busy
	}
	if u.Wall > 0 && cores > 0 {
		util = 100 * busy / (u.Wall.Seconds() * float64(cores))
	}
	return fmt.Sprintf("%.2f CPU-s busy (%.0f %% in the kernel) over %.2f s, %.0f %% of %d CPUs", busy, kernel, u.Wall.Seconds(), util, cores)
}

// Idle waits: a run starts once the CPUs were at least idleShare idle
// over one idleWindow (the previous run's teardown, whose namespace
// deletions the kernel finishes in the background, is over), waiting at
// most idleLimit.
const (
	idleShare  = 0.9
	idleWindow = time.Second
	idleLimit  = time.Minute
)

// waitIdle waits for an idle machine and says how long it waited.
func waitIdle(ctx context.Context) string {
	start := time.Now()
	for ctx.Err() == nil {
		a, err := readCPUTicks()
		if err != nil {
			return fmt.Sprintf("no wait (%v)", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(idleWindow):
		}
		b, err := readCPUTicks()
		if err != nil {
			return fmt.Sprintf("no wait (%v)", err)
		}
		u := a.until(b)
		total := u.Busy() + u.Idle
		switch {
		case total > 0 && float64(u.Idle)/float64(total) >= idleShare:
			return fmt.Sprintf("idle after %.0f s", time.Since(start).Seconds())
		case time.Since(start) >= idleLimit:
			return fmt.Sprintf("still %.0f %% busy after %.0f s, measured anyway", 100*float64(u.Busy())/float64(total), time.Since(start).Seconds())
		}
	}
	return "cancelled"
}

// secondsList formats durations as "1.2, 1.3, 1.2".
func secondsList(ds []time.Duration) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmt.Sprintf("%.2f", d.Seconds())
	}
	return strings.Join(out, ", ")
}

// manyCPUFinding says where the machine's CPU went while the 100
// allocations started in each mode: the bridge run's extra is the
// network set-up, mostly the kernel's (namespaces, veths, iptables
// commits, process start-up of the plugins and of iptables).
func manyCPUFinding(m *manyResult) string {
	if m == nil || !m.cpuOK || m.hostErr != nil || m.bridgeCPU.Wall == 0 || m.hostCPU.Wall == 0 {
		return ""
	}
	cores := runtime.NumCPU()
	extra := m.bridgeCPU.Busy() - m.hostCPU.Busy()
	extraKernel := m.bridgeCPU.Kernel - m.hostCPU.Kernel
	share := 0.0
	if extra > 0 {
		share = 100 * extraKernel.Seconds() / extra.Seconds()
	}
	return fmt.Sprintf("%d allocations → all running, where the time goes (machine-wide CPU from /proc/stat, the agent, its task executors, "+
		"CNI plugins and iptables together): median bridge run %s; median host run %s. The bridge run's extra %.2f CPU-s (%.0f ms per allocation, %.0f %% of it "+
		"in the kernel) is the network set-up: namespace, veth pair and bridge port, addresses and routes, the firewall plugin's two ACCEPT rules "+
		"(10 iptables execs per ADD, each a process start and, for a change, an nf_tables commit) and the start-up of four static plugin "+
		"binaries; a host-mode start already costs each task an executor process start. With the CPUs saturated in the bridge run, the ratio "+
		"is set by this extra CPU time, not by waiting: meshlet's own part (the CNI calls, records) is small beside it. Idle waits: %s.",
		manyAllocs, m.bridgeCPU.String(cores), m.hostCPU.String(cores), extra.Seconds(),
		1000*extra.Seconds()/manyAllocs, share, strings.Join(m.waits, "; "))
}
