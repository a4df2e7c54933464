package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Options configure a run.
type Options struct {
	Repo    string // repository root
	GoBin   string // "go"
	Meshlet string // bin/meshlet
	CNIPath string // bin/cni
	Fortio  string // fortio binary ("" = not installed)
	Iperf3  string // iperf3 binary ("" = not installed)
	OutDir  string // where results.json and RESULTS.md go
	// Areas limits the run to these areas ("controlplane", "lifecycle",
	// "dataplane", "l7", "gateway", "faults", "cluster", "clustermesh");
	// empty runs all. A partial run replaces only its areas' sections of
	// the results already in OutDir (see MergeReports).
	Areas  []string
	Logger hclog.Logger
	// Keep leaves the scratch directory (agent logs, profiles) in place.
	Keep bool
	// DataRounds is how many interleaved rounds each data-plane block
	// runs (0: dataRounds). QuietWait bounds the wait for a quiet machine
	// before each block (0: defaultQuietWait).
	DataRounds int
	QuietWait  time.Duration
}

// area is one measured area: its -areas key, the Name its run gives the
// Area (to recognize results written before areas carried their key) and
// how it runs.
type area struct {
	key  string
	name string
	run  func(r *Runner, ctx context.Context) *Area
}

// areas run in this order. The allocation lifecycle goes first: CNI
// setup and teardown slow down with the size of the conntrack table
// (portmap clears stale UDP entries by dumping it), and the other areas'
// tens of thousands of connections leave entries behind for minutes. The
// control plane goes last: its 10,000-proxy runs leave a large process's
// memory and sockets to be torn down while the next area would measure.
var areas = []area{
	{"lifecycle", "Allocation lifecycle", (*Runner).lifecycle},
	{"dataplane", "Data plane (built-in proxy)", (*Runner).dataPlane},
	// L7 before the control plane: its per-request CPU is the process's
	// own, but its times should not share the machine with the teardown.
	{"l7", "L7 routing (built-in proxy)", (*Runner).l7},
	// The ingress gateway after L7, like the data plane a fortio load
	// against a real agent, before the control plane's teardown.
	{"gateway", "Ingress gateway (built-in proxy)", (*Runner).gateway},
	{"controlplane", "Control plane", (*Runner).controlPlane},
	// Faults last: its 60 s outage and 1,000 cycles take the longest.
	{"faults", "Faults", (*Runner).faults},
	{"cluster", "Cluster", (*Runner).cluster},
	{"clustermesh", "Cluster mesh", (*Runner).clusterMesh},
}

// Runner runs the areas and collects the report.
type Runner struct {
	opts    Options
	log     hclog.Logger
	scratch string
	seq     int
}

// NewRunner checks the options and returns a runner.
func NewRunner(o Options) (*Runner, error) {
	if o.Repo == "" {
		return nil, fmt.Errorf("failed to configure bench: repository root is required")
	}
	if o.GoBin == "" {
		o.GoBin = "go"
	}
	if o.OutDir == "" {
		o.OutDir = filepath.Join(o.Repo, "bench")
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	for _, a := range o.Areas {
		if !knownArea(a) {
			return nil, fmt.Errorf("failed to configure bench: unknown area %q (want dataplane, lifecycle, l7, gateway, controlplane, faults, cluster or clustermesh)", a)
		}
	}
	return &Runner{opts: o, log: o.Logger.Named("bench")}, nil
}

func knownArea(k string) bool {
	return slices.ContainsFunc(areas, func(a area) bool { return a.key == k })
}

func (r *Runner) wants(k string) bool {
	return len(r.opts.Areas) == 0 || slices.Contains(r.opts.Areas, k)
}

// Run measures every selected area and writes results.json and RESULTS.md.
func (r *Runner) Run(ctx context.Context) (*Report, error) {
	start := time.Now()
	dir, err := os.MkdirTemp("", "meshlet-bench-")
	if err != nil {
		return nil, fmt.Errorf("failed to create scratch dir: %w", err)
	}
	if r.opts.Keep {
		r.log.Info("keeping scratch dir", "path", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	r.scratch = dir
	rep := &Report{Machine: DescribeMachine(ctx, r.opts.GoBin, r.opts.Repo), Started: start.UTC().Format(time.RFC3339)}
	rep.Machine.LoadGen = r.loadGens()
	for _, a := range areas {
		if !r.wants(a.key) {
			continue
		}
		r.log.Info("measuring", "area", a.key)
		t0 := time.Now()
		res := a.run(r, ctx)
		res.Key = a.key
		res.Elapsed = time.Since(t0).Round(time.Second).String()
		rep.Areas = append(rep.Areas, res)
		r.log.Info("measured", "area", a.key, "elapsed", res.Elapsed)
		if ctx.Err() != nil {
			break
		}
	}
	rep.Duration = time.Since(start).Round(time.Second).String()
	if err := os.MkdirAll(r.opts.OutDir, 0o755); err != nil {
		return rep, fmt.Errorf("failed to create output dir: %w", err)
	}
	out := rep
	if len(r.opts.Areas) > 0 {
		out = r.mergePrevious(rep)
	}
	if err := out.WriteJSON(filepath.Join(r.opts.OutDir, "results.json")); err != nil {
		return rep, err
	}
	return rep, out.WriteMarkdown(filepath.Join(r.opts.OutDir, "RESULTS.md"))
}

// mergePrevious puts a partial run's areas into the results already in
// the output directory; without readable previous results it is the run
// alone.
func (r *Runner) mergePrevious(rep *Report) *Report {
	path := filepath.Join(r.opts.OutDir, "results.json")
	prev, err := ReadReport(path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			r.log.Warn("previous results unreadable; writing this run's areas only", "path", path, "error", err)
		}
		return rep
	}
	r.log.Info("merging into previous results", "path", path, "areas", strings.Join(r.opts.Areas, ","))
	return MergeReports(prev, rep)
}

func (r *Runner) loadGens() string {
	var gens []string
	for _, g := range []struct{ name, bin string }{{"fortio", r.opts.Fortio}, {"iperf3", r.opts.Iperf3}} {
		if g.bin == "" {
			gens = append(gens, g.name+" (missing)")
			continue
		}
		v := output(context.Background(), r.opts.Repo, g.bin, "version")
		if g.name == "iperf3" {
			v = output(context.Background(), r.opts.Repo, g.bin, "--version")
		}
		v, _, _ = strings.Cut(v, "\n")
		gens = append(gens, fmt.Sprintf("%s %s", g.name, strings.TrimSpace(strings.TrimPrefix(v, "iperf "))))
	}
	return strings.Join(gens, ", ")
}

// goBench runs one package's benchmarks from the repository root.
func (r *Runner) goBench(ctx context.Context, g GoBenchRun) ([]GoBench, error) {
	r.log.Info("go benchmark", "pkg", g.Pkg, "bench", g.Bench)
	return g.Run(ctx, r.opts.GoBin, r.opts.Repo)
}

// profile runs a benchmark under the CPU profiler and summarizes it.
func (r *Runner) profile(ctx context.Context, what string, g GoBenchRun) string {
	g.CPUProfile = filepath.Join(r.scratch, fmt.Sprintf("cpu-%d.out", time.Now().UnixNano()))
	if _, err := r.goBench(ctx, g); err != nil {
		return fmt.Sprintf("%s: no profile: %v", what, err)
	}
	flat, err := PprofTop(ctx, r.opts.GoBin, g.CPUProfile, 8, false)
	if err != nil {
		return fmt.Sprintf("%s: no profile: %v", what, err)
	}
	cum, err := PprofTop(ctx, r.opts.GoBin, g.CPUProfile, 60, true)
	if err != nil {
		return fmt.Sprintf("%s: no profile: %v", what, err)
	}
	return Summarize(what, flat, cum, "meshlet/meshlet/", 5)
}

// startAgent starts a fresh agent for one area.
func (r *Runner) startAgent(ctx context.Context) (*Agent, error) {
	r.seq++
	return StartAgent(ctx, AgentOptions{Bin: r.opts.Meshlet, CNIPath: r.opts.CNIPath, Dir: r.scratch, Seq: r.seq})
}
