package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// dpArm is one path the data-plane area measures from the client
// allocation's namespace: straight to the apps (direct), through the two
// built-in sidecars (meshlet), or through a peer proxy pair (HAProxy,
// nginx). The same measurement code runs every arm.
type dpArm interface {
	Name() string
	// HTTPURL is the HTTP service (keep-alive on both legs).
	HTTPURL() string
	// ConnURL is the L4 service fortio opens one connection per request
	// to (a TLS handshake each through a proxy pair).
	ConnURL() string
	// BulkAddr is the iperf3 server's address through this arm.
	BulkAddr() (string, int)
	// Procs are the processes to watch during a load of kind (loadHTTP or
	// loadBulk), by role ("client sidecar", "server sidecar", "server
	// app"); none for the direct path.
	Procs(kind string) map[string]int
}

// Kinds of load an arm's processes are watched during.
const (
	loadHTTP = "http"
	loadBulk = "bulk"
)

// pathArm is an arm given by its addresses (direct and meshlet).
type pathArm struct {
	name, http, conn, bulkHost string
	bulkPort                   int
	procs                      func(kind string) map[string]int
}

func (a pathArm) Name() string            { return a.name }
func (a pathArm) HTTPURL() string         { return a.http }
func (a pathArm) ConnURL() string         { return a.conn }
func (a pathArm) BulkAddr() (string, int) { return a.bulkHost, a.bulkPort }
func (a pathArm) Procs(kind string) map[string]int {
	if a.procs == nil {
		return map[string]int{}
	}
	return a.procs(kind)
}

// A peer pair is an arm: its client side listens on the client
// namespace's 127.0.0.1.
func (p *peerProxy) Name() string { return p.name }
func (p *peerProxy) HTTPURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/", p.layout.HTTP)
}
func (p *peerProxy) ConnURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/", p.layout.Conn)
}
func (p *peerProxy) BulkAddr() (string, int)     { return "127.0.0.1", p.layout.Bulk }
func (p *peerProxy) Procs(string) map[string]int { return p.procs() }

// rotation is the order of n arms in round i: round 0 runs them as given,
// each later round starts one arm further, so every arm runs in every
// position and none always follows the same other.
func rotation(n, round int) []int {
	order := make([]int, n)
	for k := range order {
		order[k] = (round + k) % n
	}
	return order
}

// armRuns are one arm's per-round results; a block's first error stops
// that block for the arm (the other arms go on).
type armRuns struct {
	fixed   []FortioResult
	usage   []map[string]sidecarUsage // watched during each fixed-rate run
	maxRPS  []float64
	conns   []float64
	gbps    []float64
	bulkCPU []float64 // the arm's proxies' vCPU during each bulk run, summed
	errs    map[string]error
}

func (a *armRuns) err(block string) error { return a.errs[block] }

// dpRuns are every arm's results and the quiet-machine waits.
type dpRuns struct {
	rounds int
	arms   map[string]*armRuns
	waits  []string
	// syscalls are system calls per request by arm and proxy role,
	// counted in one more fixed-rate run (syscallErr: why not).
	syscalls   map[string]map[string]float64
	syscallErr error
}

// interleave runs block for every arm in every round, in rotated order,
// after waiting for a quiet machine.
func (r *Runner) interleave(ctx context.Context, runs *dpRuns, block string, arms []dpArm, run func(dpArm, *armRuns) error) {
	runs.waits = append(runs.waits, r.waitQuiet(ctx, block))
	for i := 0; i < runs.rounds && ctx.Err() == nil; i++ {
		for _, k := range rotation(len(arms), i) {
			a := arms[k]
			res := runs.arms[a.Name()]
			if res.err(block) != nil {
				continue
			}
			if err := run(a, res); err != nil {
				res.errs[block] = err
				r.log.Warn("data-plane run failed", "block", block, "arm", a.Name(), "error", err)
			}
		}
	}
}

// Quiet-machine wait before each block: the 1-minute load average under
// quietLoad, for at most Options.QuietWait (default defaultQuietWait).
const (
	quietLoad        = 1.0
	defaultQuietWait = 2 * time.Minute
)

// waitQuiet waits until the machine's 1-minute load average is under
// quietLoad or the bounded wait ends, and says how it went.
func (r *Runner) waitQuiet(ctx context.Context, block string) string {
	limit := r.opts.QuietWait
	if limit <= 0 {
		limit = defaultQuietWait
	}
	start := time.Now()
	first, err := loadAvg()
	if err != nil {
		return fmt.Sprintf("%s: no wait (%v)", block, err)
	}
	last := first
	for last >= quietLoad && time.Since(start) < limit && ctx.Err() == nil {
		time.Sleep(2 * time.Second)
		if last, err = loadAvg(); err != nil {
			break
		}
	}
	verdict := "quiet"
	if last >= quietLoad {
		verdict = "still busy, measured anyway"
	}
	return fmt.Sprintf("%s: waited %s, load %.2f → %.2f (%s)", block, time.Since(start).Round(time.Second), first, last, verdict)
}

// loadAvg is the 1-minute load average.
func loadAvg() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, fmt.Errorf("failed to read load average: %w", err)
	}
	return parseLoadAvg(string(b))
}

func parseLoadAvg(s string) (float64, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, fmt.Errorf("failed to parse load average %q", s)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("failed to parse load average: %w", err)
	}
	return v, nil
}
