package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ErrNoBenchmark is returned when `go test -bench` ran but reported no
// benchmark line (the benchmark is missing or skipped itself).
var ErrNoBenchmark = errors.New("no benchmark result")

// GoBench is one result line of `go test -bench`.
type GoBench struct {
	Name    string             // without the -GOMAXPROCS suffix: "BenchmarkFanout/sotw/proxies=100"
	Pkg     string             // from the preceding "pkg:" line
	N       int64              // iterations
	Metrics map[string]float64 // unit → value: "ns/op", "p99_ms", "MB/s"...
}

var procsSuffix = regexp.MustCompile(`-\d+$`)

// ParseGoBench reads the text output of `go test -bench` (with or without
// -v) and returns every benchmark result line, plus the reasons of any
// skipped or failed benchmark ("BenchmarkX: reason").
func ParseGoBench(out string) (results []GoBench, problems []string) {
	pkg := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var pending string // name of the last --- SKIP/FAIL header
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "pkg: "):
			pkg = strings.TrimSpace(strings.TrimPrefix(line, "pkg: "))
			continue
		case strings.HasPrefix(trimmed, "--- SKIP: ") || strings.HasPrefix(trimmed, "--- FAIL: "):
			f := strings.Fields(trimmed)
			pending = f[2]
			continue
		case pending != "" && strings.HasPrefix(line, "    "):
			problems = append(problems, pending+": "+trimmed)
			pending = ""
			continue
		}
		if r, ok := parseBenchLine(line); ok {
			r.Pkg = pkg
			results = append(results, r)
		}
	}
	return results, problems
}

// parseBenchLine parses "BenchmarkX-2  20  5683072 ns/op  30.00 affected".
func parseBenchLine(line string) (GoBench, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
		return GoBench{}, false
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return GoBench{}, false
	}
	r := GoBench{Name: procsSuffix.ReplaceAllString(f[0], ""), N: n, Metrics: map[string]float64{}}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return GoBench{}, false
		}
		r.Metrics[f[i+1]] = v
	}
	return r, true
}

// Find returns the result named name (exact, without the procs suffix).
func Find(rs []GoBench, name string) (GoBench, bool) {
	for _, r := range rs {
		if r.Name == name {
			return r, true
		}
	}
	return GoBench{}, false
}

// GoBenchRun is one `go test -bench` invocation.
type GoBenchRun struct {
	Pkg       string // "./xds/"
	Bench     string // -bench regexp
	BenchTime string // -benchtime
	Env       []string
	Timeout   time.Duration
	// CPUProfile, when set, is passed as -cpuprofile (a path).
	CPUProfile string
}

// Run runs the benchmark from dir (the repository root) and parses its
// output. A non-zero exit or no result line is an error that carries the
// reason go test printed.
func (g GoBenchRun) Run(ctx context.Context, goBin, dir string) ([]GoBench, error) {
	timeout := g.Timeout
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
	defer cancel()
	args := []string{"test", "-run", "^$", "-bench", g.Bench, "-benchtime", g.BenchTime, "-count", "1", "-timeout", timeout.String()}
	if g.CPUProfile != "" {
		args = append(args, "-cpuprofile", g.CPUProfile)
	}
	args = append(args, g.Pkg)
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), g.Env...)
	out, err := cmd.CombinedOutput()
	results, problems := ParseGoBench(string(out))
	if err != nil {
		return results, fmt.Errorf("failed to run %s benchmarks: %w: %s", g.Pkg, err, lastLines(string(out), 3, problems))
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("%w in %s: %s", ErrNoBenchmark, g.Pkg, lastLines(string(out), 3, problems))
	}
	return results, nil
}

// lastLines is a short reason: the skip/fail reasons when there are any,
// else the last n non-empty lines of out, joined on one line.
func lastLines(out string, n int, problems []string) string {
	if len(problems) > 0 {
		return strings.Join(problems, "; ")
	}
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "exit status") {
			keep = append(keep, l)
		}
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return strings.Join(keep, " / ")
}
