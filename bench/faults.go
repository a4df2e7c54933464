package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Fault runs: the e2e fault tests (e2e/faults) assert the outcomes; run
// from here with a 60 s control-plane outage and 1,000 start/stop cycles,
// they print the figures as "FAULTFIG <key> <value>" lines.
const (
	faultOutage  = 60 * time.Second
	faultCycles  = 1000
	faultTimeout = 60 * time.Minute
	faultTests   = "^(TestMeshSurvivesControlPlaneFaults|TestLostOrCorruptStateRefusesToStart|TestFullDisk|TestStartStopCyclesLeaveNothing)$"
)

// faultFig describes how one FAULTFIG key is shown.
type faultFig struct {
	key, name, unit string
	target          *Target
}

var zero = &Target{Of: OfValue, Op: "<=", Limit: 0}
var one = &Target{Of: OfValue, Op: ">=", Limit: 1}

var faultFigs = []faultFig{
	{"crash_failed", "agent SIGKILL + restart under load: failed requests", "requests", zero},
	{"crash_reattached", "agent SIGKILL + restart: tasks reattached (same PIDs)", "yes=1", one},
	{"crash_extra_processes", "agent SIGKILL + restart: extra processes in the allocations", "processes", zero},
	{"outage_failed", "control plane away (agent stopped): failed requests", "requests", zero},
	{"sidecar_kill_recovery_seconds", "sidecar SIGKILL: time until traffic flows again", "s", nil},
	{"fulldisk_write_refused", "full data dir: job registration refused", "yes=1", one},
	{"fulldisk_error_says_disk_full", "full data dir: the error says the disk is full", "yes=1", one},
	{"fulldisk_state_intact", "full data dir: stored jobs and intentions intact", "yes=1", one},
	{"fulldisk_reads_served", "full data dir: reads still served", "yes=1", one},
	{"fulldisk_workload_alive", "full data dir: running workload alive", "yes=1", one},
	{"state_faults_refused_clearly", "lost or corrupt state files: refused with an error naming the file, workload kept", "cases", nil},
	{"left_namespaces", "start/stop cycles: namespaces left", "namespaces", zero},
	{"left_veths", "start/stop cycles: veths left", "veths", zero},
	{"left_iptables_rules", "start/stop cycles: iptables rules left", "rules", zero},
	{"left_ipam_leases", "start/stop cycles: IPAM leases left", "leases", zero},
	{"left_alloc_dirs", "start/stop cycles: alloc dirs left", "dirs", zero},
	{"left_files", "start/stop cycles: files added under the data dir", "files", zero},
	{"goroutines_added", "start/stop cycles: agent goroutines added", "goroutines", nil},
	{"rss_added_mib", "start/stop cycles: agent RSS added", "MiB", nil},
}

func (r *Runner) faults(ctx context.Context) *Area {
	a := &Area{
		Name: "Faults",
		Intro: fmt.Sprintf("The e2e fault tests (e2e/faults) against the real agent, run with a %s control-plane outage and %d "+
			"start/stop cycles of a bridge job with a mapped port. Load: about 200 new connections a second through an echo "+
			"mesh, each authorized by the server's sidecar. Targets are the issue's: nothing fails, nothing is left.", faultOutage, faultCycles),
	}
	out, err := r.runFaultTests(ctx)
	vals := ParseFaultFigures(out)
	for _, f := range faultFigs {
		v, ok := vals[f.key]
		if !ok {
			a.Figures = append(a.Figures, NotMeasured(f.name, f.unit, reason(err, "the test did not report it"), f.target))
			continue
		}
		fig := Measured(f.name, f.unit, v, nil, f.target)
		switch f.key {
		case "crash_failed":
			fig.Note = fmt.Sprintf("of %v requests", vals["crash_requests"])
		case "outage_failed":
			fig.Note = fmt.Sprintf("of %v requests; outage %vs", vals["outage_requests"], vals["outage_seconds"])
		case "state_faults_refused_clearly":
			fig.Note = fmt.Sprintf("of %v cases", vals["state_faults"])
		case "left_namespaces":
			fig.Note = fmt.Sprintf("after %v cycles", vals["cycles"])
		}
		a.Figures = append(a.Figures, fig)
	}
	if err != nil {
		a.Findings = append(a.Findings, "The fault tests failed: "+err.Error())
	}
	return a
}

// runFaultTests runs the fault tests verbosely and returns their output;
// err carries the failing tests' names.
func (r *Runner) runFaultTests(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, faultTimeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.opts.GoBin, "test", "-count=1", "-v", "-timeout", faultTimeout.String(), "-run", faultTests, "./e2e/faults/")
	cmd.Dir = r.opts.Repo
	cmd.Env = append(os.Environ(),
		"MESHLET_BIN="+r.opts.Meshlet, "MESHLET_CNI_PATH="+r.opts.CNIPath,
		"MESHLET_FAULTS_OUTAGE="+faultOutage.String(), "MESHLET_FAULTS_CYCLES="+strconv.Itoa(faultCycles))
	outb, err := cmd.CombinedOutput()
	out := string(outb)
	if err != nil {
		var failed []string
		for _, l := range strings.Split(out, "\n") {
			if t := strings.TrimSpace(l); strings.HasPrefix(t, "--- FAIL: ") {
				failed = append(failed, strings.Fields(t)[2])
			}
		}
		return out, fmt.Errorf("go test ./e2e/faults: %w (failed: %s)", err, strings.Join(failed, ", "))
	}
	return out, nil
}

// ParseFaultFigures reads the "FAULTFIG <key> <value>" lines of a verbose
// `go test` run (t.Logf prefixes them with the file and line).
func ParseFaultFigures(out string) map[string]float64 {
	vals := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		for i := 0; i+2 < len(f); i++ {
			if f[i] != "FAULTFIG" {
				continue
			}
			if v, err := strconv.ParseFloat(f[i+2], 64); err == nil {
				vals[f[i+1]] = v
			}
			break
		}
	}
	return vals
}
