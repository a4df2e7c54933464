package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// Main runs `benchrun [flags]` and returns the exit code: 0 when the
// results were written (whatever targets were missed), 1 on a harness
// error, 2 on bad flags.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("benchrun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	areasFlag := ""
	fs.StringVar(&o.Repo, "repo", ".", "repository root `DIR`")
	fs.StringVar(&o.GoBin, "go", "go", "go command")
	fs.StringVar(&o.Meshlet, "meshlet", "", "meshlet binary (default REPO/bin/meshlet)")
	fs.StringVar(&o.CNIPath, "cni-path", "", "CNI plugin dir (default REPO/bin/cni)")
	fs.StringVar(&o.Fortio, "fortio", "", "fortio binary (default REPO/bin/fortio if present)")
	fs.StringVar(&o.Iperf3, "iperf3", "", "iperf3 binary (default: found on PATH)")
	fs.StringVar(&o.OutDir, "out", "", "output `DIR` for results.json and RESULTS.md (default REPO/bench)")
	fs.StringVar(&areasFlag, "areas", "", "comma-separated areas to run: dataplane,lifecycle,l7,gateway,controlplane,faults,cluster,clustermesh (default all); "+
		"a partial run replaces only these areas' sections of the results already in the output dir")
	fs.IntVar(&o.DataRounds, "data-rounds", 0, fmt.Sprintf("interleaved rounds per data-plane and gateway block (0: %d; fewer than %d: a smoke run, not a result)", dataPlaneRounds, dataRounds))
	fs.DurationVar(&o.QuietWait, "quiet-wait", defaultQuietWait, "longest wait for a quiet machine (load under 1.0) before each data-plane block")
	fs.BoolVar(&o.Keep, "keep", false, "keep the scratch directory (agent logs, profiles) for debugging")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "Error: unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		return 2
	}
	if err := o.resolve(areasFlag); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 2
	}
	o.Logger = hclog.New(&hclog.LoggerOptions{Name: "meshlet", Level: hclog.Info, Output: stderr})
	r, err := NewRunner(o)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := r.Run(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}
	missed, unmeasured := rep.Missed()
	fmt.Fprintf(stdout, "wrote %s and %s (%d targets missed, %d not measured) in %s\n",
		filepath.Join(r.opts.OutDir, "RESULTS.md"), filepath.Join(r.opts.OutDir, "results.json"), len(missed), len(unmeasured), rep.Duration)
	return 0
}

// resolve fills the defaults that depend on the repository root.
func (o *Options) resolve(areasFlag string) error {
	abs, err := filepath.Abs(o.Repo)
	if err != nil {
		return fmt.Errorf("failed to resolve repository root: %w", err)
	}
	o.Repo = abs
	if _, err := os.Stat(filepath.Join(abs, "go.mod")); err != nil {
		return fmt.Errorf("%s is not the repository root (no go.mod)", abs)
	}
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&o.Meshlet, filepath.Join(abs, "bin", "meshlet"))
	def(&o.CNIPath, filepath.Join(abs, "bin", "cni"))
	if o.Fortio == "" {
		if _, err := os.Stat(filepath.Join(abs, "bin", "fortio")); err == nil {
			o.Fortio = filepath.Join(abs, "bin", "fortio")
		}
	}
	if o.Iperf3 == "" {
		if p, err := exec.LookPath("iperf3"); err == nil {
			o.Iperf3 = p
		}
	}
	for _, p := range []string{o.Meshlet, o.CNIPath} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s is missing: run `make all` first", p)
		}
	}
	if areasFlag != "" {
		o.Areas = strings.Split(areasFlag, ",")
	}
	return nil
}
