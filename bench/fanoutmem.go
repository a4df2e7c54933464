package bench

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// MemPoint is the server process's memory at one moment: the Go runtime's
// view (reported by the process) and the kernel's (/proc/<pid>/status,
// read by the harness).
type MemPoint struct {
	Heap HeapSample
	Proc ProcSample
}

// FanoutMemory is the xDS server process's memory before any simulated
// proxy connects (the topology already registered and compiled) and once
// all N have ACKed their initial config; the proxies run in another process.
type FanoutMemory struct {
	Mode          string // "delta" or "sotw"
	Proxies       int
	Before, After MemPoint
	// EmptyHeap is the server's HeapInuse before the topology was registered.
	EmptyHeap uint64
	ConnectMs float64 // the client process's connect time, for the record
}

// PerProxy is the growth per connected proxy, in bytes.
type PerProxy struct {
	Heap, Stack, RSS, Anon, Goroutines float64
}

// PerProxy divides the growth from Before to After by N.
func (m FanoutMemory) PerProxy() PerProxy {
	n := float64(max(m.Proxies, 1))
	d := func(a, b uint64) float64 { return (float64(b) - float64(a)) / n }
	return PerProxy{
		Heap:       d(m.Before.Heap.HeapInuse, m.After.Heap.HeapInuse),
		Stack:      d(m.Before.Heap.StackInuse, m.After.Heap.StackInuse),
		RSS:        float64(m.After.Proc.RSSBytes-m.Before.Proc.RSSBytes) / n,
		Anon:       float64(m.After.Proc.AnonBytes-m.Before.Proc.AnonBytes) / n,
		Goroutines: float64(m.After.Heap.Goroutines-m.Before.Heap.Goroutines) / n,
	}
}

// BuildXDSLoad builds bench/cmd/xdsload into dir and returns its path.
func BuildXDSLoad(ctx context.Context, goBin, repo, dir string) (string, error) {
	bin := filepath.Join(dir, "xdsload")
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, "./bench/cmd/xdsload")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("failed to build xdsload: %w: %s", err, lastLines(string(out), 3, nil))
	}
	return bin, nil
}

// MeasureFanoutMemory starts the xDS server (bin -role server, its state
// in dataDir, or a temporary dir when empty) and, once
// its baseline is sampled, n simulated proxies in a second process (bin
// -role client), and samples the server again once they are all connected
// and configured. Both processes are stopped before it returns.
func MeasureFanoutMemory(ctx context.Context, bin, dataDir, mode string, n int) (m FanoutMemory, err error) {
	m = FanoutMemory{Mode: mode, Proxies: n}
	srv, err := startLoadProc(ctx, bin, "server", "-proxies", strconv.Itoa(n), "-data-dir", dataDir)
	if err != nil {
		return m, err
	}
	defer func() {
		if serr := srv.stop(); err == nil {
			err = serr
		}
	}()
	ready, err := srv.expect("ready")
	if err != nil {
		return m, err
	}
	kv, err := parseKV(ready, "ready")
	if err != nil {
		return m, err
	}
	m.EmptyHeap, _ = strconv.ParseUint(kv["empty_heap_inuse"], 10, 64)
	if m.Before, err = sampleServer(srv, 0); err != nil {
		return m, err
	}
	cl, err := startLoadProc(ctx, bin, "client", "-proxies", strconv.Itoa(n), "-mode", mode,
		"-addr", kv["addr"], "-trust-domain", kv["trust_domain"])
	if err != nil {
		return m, err
	}
	defer func() {
		if cerr := cl.stop(); err == nil {
			err = cerr
		}
	}()
	line, err := cl.expect("ready")
	if err != nil {
		return m, err
	}
	if ckv, perr := parseKV(line, "ready"); perr == nil {
		m.ConnectMs, _ = strconv.ParseFloat(ckv["connect_ms"], 64)
	}
	m.After, err = sampleServer(srv, n)
	return m, err
}

// sampleServer asks the server for its heap once connected streams reach
// want, then reads its RSS while it waits for the next command.
func sampleServer(srv *loadProc, want int) (MemPoint, error) {
	if err := srv.send(fmt.Sprintf("sample %d", want)); err != nil {
		return MemPoint{}, err
	}
	line, err := srv.expect("sample")
	if err != nil {
		return MemPoint{}, err
	}
	h, err := ParseHeapSample(line)
	if err != nil {
		return MemPoint{}, err
	}
	p, err := SampleProc(srv.pid())
	if err != nil {
		return MemPoint{}, err
	}
	return MemPoint{Heap: h, Proc: p}, nil
}

// fanoutMemory measures every size in both modes; a failed size is
// recorded as its error.
func (r *Runner) fanoutMemory(ctx context.Context) (map[string]FanoutMemory, map[string]error) {
	res, errs := map[string]FanoutMemory{}, map[string]error{}
	bin, err := BuildXDSLoad(ctx, r.opts.GoBin, r.opts.Repo, r.scratch)
	for _, s := range fanoutSizes {
		for _, mode := range []string{"delta", "sotw"} {
			key := memKey(mode, s.n)
			if err != nil {
				errs[key] = err
				continue
			}
			r.log.Info("xDS fan-out memory", "mode", mode, "proxies", s.n)
			m, merr := MeasureFanoutMemory(ctx, bin, filepath.Join(r.scratch, "xdsload-"+strings.ReplaceAll(key, "/", "-")), mode, s.n)
			if merr != nil {
				errs[key] = merr
				continue
			}
			res[key] = m
		}
	}
	return res, errs
}

func memKey(mode string, n int) string { return fmt.Sprintf("%s/%d", mode, n) }

// memFigures are the agent memory figures for one size: measured = delta,
// baseline = SotW.
func memFigures(n int, res map[string]FanoutMemory, errs map[string]error) []*Figure {
	var heapT *Target
	if n == 10000 {
		heapT = &Target{Of: OfBoth, Op: "<=", Limit: 64}
	}
	delta, okD := res[memKey("delta", n)]
	sotw, okS := res[memKey("sotw", n)]
	var figs []*Figure
	for _, m := range []struct {
		name   string
		get    func(PerProxy) float64
		target *Target
	}{
		{"agent heap per connected proxy", func(p PerProxy) float64 { return p.Heap }, heapT},
		{"agent RSS per connected proxy", func(p PerProxy) float64 { return p.RSS }, nil},
	} {
		name := fmt.Sprintf("N=%d: %s", n, m.name)
		if !okD {
			figs = append(figs, NotMeasured(name, "KiB", reason(errs[memKey("delta", n)], "no result for N=%d", n), m.target))
			continue
		}
		var base *float64
		if okS {
			base = ptr(m.get(sotw.PerProxy()) / 1024)
		}
		figs = append(figs, Measured(name, "KiB", m.get(delta.PerProxy())/1024, base, m.target))
	}
	return figs
}

// memFinding details the per-proxy memory of the largest measured size.
func memFinding(res map[string]FanoutMemory) string {
	for i := len(fanoutSizes) - 1; i >= 0; i-- {
		n := fanoutSizes[i].n
		var parts []string
		registered := ""
		for _, mode := range []string{"delta", "sotw"} {
			m, ok := res[memKey(mode, n)]
			if !ok {
				continue
			}
			p := m.PerProxy()
			parts = append(parts, fmt.Sprintf("%s: Go heap %.1f KiB + goroutine stacks %.1f KiB (%.0f goroutines), VmRSS %.1f KiB, RssAnon %.1f KiB; "+
				"server VmRSS %.0f MiB registered → %.0f MiB connected",
				mode, p.Heap/1024, p.Stack/1024, p.Goroutines, p.RSS/1024, p.Anon/1024,
				float64(m.Before.Proc.RSSBytes)/(1<<20), float64(m.After.Proc.RSSBytes)/(1<<20)))
			if mode == "delta" && m.EmptyHeap > 0 {
				registered = fmt.Sprintf("; before any proxy connects, each registered proxy's compiled resources (catalog, xDS cache) already take %.1f KiB of heap",
					(float64(m.Before.Heap.HeapInuse)-float64(m.EmptyHeap))/float64(n)/1024)
			}
		}
		if len(parts) > 0 {
			return fmt.Sprintf("Agent memory per connected proxy at N=%d (server process alone, after GC and returning free pages to the OS) — %s%s.",
				n, strings.Join(parts, "; "), registered)
		}
	}
	return ""
}
