package bench

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseHeapSample(t *testing.T) {
	cases := []struct {
		name, line string
		want       HeapSample
		wantErr    bool
	}{
		{"ok", "sample heap_inuse=10 heap_alloc=9 stack_inuse=8 goroutines=7 connected=6",
			HeapSample{HeapInuse: 10, HeapAlloc: 9, StackInuse: 8, Goroutines: 7, Connected: 6}, false},
		{"wrong word", "ready heap_inuse=10", HeapSample{}, true},
		{"empty", "", HeapSample{}, true},
		{"missing key", "sample heap_inuse=10 heap_alloc=9 goroutines=7 connected=6", HeapSample{}, true},
		{"not a number", "sample heap_inuse=x heap_alloc=9 stack_inuse=8 goroutines=7 connected=6", HeapSample{}, true},
		{"not key=value", "sample heap_inuse", HeapSample{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseHeapSample(c.line)
			if c.wantErr {
				if !errors.Is(err, ErrBadLine) {
					t.Fatalf("ParseHeapSample(%q) = %v, want ErrBadLine", c.line, err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("ParseHeapSample(%q) = %+v, %v; want %+v", c.line, got, err, c.want)
			}
		})
	}
}

func memPoint(heap, stack uint64, goroutines int, rss, anon int64) MemPoint {
	return MemPoint{Heap: HeapSample{HeapInuse: heap, StackInuse: stack, Goroutines: goroutines}, Proc: ProcSample{RSSBytes: rss, AnonBytes: anon}}
}

func TestFanoutMemoryPerProxy(t *testing.T) {
	cases := []struct {
		name string
		m    FanoutMemory
		want PerProxy
	}{
		{"growth", FanoutMemory{Proxies: 4, Before: memPoint(100, 10, 2, 1000, 800), After: memPoint(500, 50, 22, 2000, 1600)},
			PerProxy{Heap: 100, Stack: 10, Goroutines: 5, RSS: 250, Anon: 200}},
		{"shrink is negative, not wrapped", FanoutMemory{Proxies: 2, Before: memPoint(500, 10, 2, 1000, 800), After: memPoint(100, 10, 2, 1000, 800)},
			PerProxy{Heap: -200}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.m.PerProxy(); got != c.want {
				t.Fatalf("PerProxy() = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestMemFigures(t *testing.T) {
	kib := int64(1024)
	res := map[string]FanoutMemory{
		"delta/10000": {Proxies: 10000, Before: memPoint(0, 0, 0, 0, 0), After: memPoint(uint64(10000*30*kib), 0, 0, 10000*50*kib, 0)},
		"sotw/10000":  {Proxies: 10000, Before: memPoint(0, 0, 0, 0, 0), After: memPoint(uint64(10000*70*kib), 0, 0, 10000*90*kib, 0)},
		"delta/1000":  {Proxies: 1000, Before: memPoint(0, 0, 0, 0, 0), After: memPoint(uint64(1000*20*kib), 0, 0, 1000*40*kib, 0)},
	}
	errs := map[string]error{"delta/100": errors.New("server crashed")}
	cases := []struct {
		name                string
		n                   int
		heap, rss, base     *float64
		met                 *bool
		notMeasuredContains string
	}{
		{"target at 10000, baseline misses", 10000, ptr(30.0), ptr(50.0), ptr(70.0), ptr(false), ""},
		{"no sotw: no baseline, no target", 1000, ptr(20.0), ptr(40.0), nil, nil, ""},
		{"failed size says why", 100, nil, nil, nil, nil, "server crashed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			figs := memFigures(c.n, res, errs)
			if len(figs) != 2 || !strings.Contains(figs[0].Name, "heap") || !strings.Contains(figs[1].Name, "RSS") {
				t.Fatalf("figures = %+v, want heap then RSS", figs)
			}
			if c.notMeasuredContains != "" {
				for _, f := range figs {
					if !strings.Contains(f.NotMeasured, c.notMeasuredContains) {
						t.Errorf("%s: not measured %q, want it to contain %q", f.Name, f.NotMeasured, c.notMeasuredContains)
					}
				}
				return
			}
			eq := func(what string, got, want *float64) {
				if (got == nil) != (want == nil) || (got != nil && *got != *want) {
					t.Errorf("%s = %v, want %v", what, deref(got), deref(want))
				}
			}
			eq("heap", figs[0].Value, c.heap)
			eq("rss", figs[1].Value, c.rss)
			eq("heap baseline", figs[0].Baseline, c.base)
			if (figs[0].Met == nil) != (c.met == nil) || (c.met != nil && *figs[0].Met != *c.met) {
				t.Errorf("heap met = %v, want %v", figs[0].Met, c.met)
			}
			if figs[1].Target != nil {
				t.Errorf("RSS has target %v, want none", figs[1].Target)
			}
		})
	}
}

func TestWithMemoryOrdersBySize(t *testing.T) {
	var in []*Figure
	for _, s := range fanoutSizes {
		in = append(in, Measured(strings.Replace("N=X: connect all proxies", "X", strconv.Itoa(s.n), 1), "ms", 1, nil, nil))
	}
	out := withMemory(in, nil, nil)
	if len(out) != 3*len(fanoutSizes) {
		t.Fatalf("got %d figures, want %d", len(out), 3*len(fanoutSizes))
	}
	for i, s := range fanoutSizes {
		prefix := "N=" + strconv.Itoa(s.n) + ": "
		for j := 0; j < 3; j++ {
			if f := out[3*i+j]; !strings.HasPrefix(f.Name, prefix) {
				t.Errorf("figure %d is %q, want prefix %q", 3*i+j, f.Name, prefix)
			}
		}
	}
}

func TestXDSLoadRejectsBadFlags(t *testing.T) {
	cases := []struct {
		name string
		args []string
	}{
		{"no proxies", []string{"-role", "server"}},
		{"unknown role", []string{"-role", "proxy", "-proxies", "1"}},
		{"unknown mode", []string{"-role", "client", "-proxies", "1", "-mode", "rest", "-addr", "127.0.0.1:1", "-trust-domain", "td"}},
		{"client without address", []string{"-role", "client", "-proxies", "1", "-trust-domain", "td"}},
		{"unknown flag", []string{"-role", "server", "-proxies", "1", "-port", "8502"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := XDSLoad(context.Background(), c.args, strings.NewReader(""), io.Discard, io.Discard)
			if err == nil || strings.Contains(err.Error(), "\n") {
				t.Fatalf("XDSLoad(%v) = %v, want a one-line error", c.args, err)
			}
		})
	}
}

func TestRaiseFileLimit(t *testing.T) {
	var before unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &before); err != nil {
		t.Fatal(err)
	}
	if err := RaiseFileLimit(before.Cur); err != nil {
		t.Fatalf("RaiseFileLimit(current) = %v, want no-op", err)
	}
	if err := RaiseFileLimit(before.Max); err != nil {
		t.Fatalf("RaiseFileLimit(hard limit) = %v", err)
	}
	var after unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &after); err != nil {
		t.Fatal(err)
	}
	if after.Cur < before.Max {
		t.Fatalf("soft limit %d after raising to %d", after.Cur, before.Max)
	}
}

// TestFanoutInProcess runs the real control plane and real simulated
// proxies (both modes) in this process: every proxy must be configured and
// counted as connected by the server.
func TestFanoutInProcess(t *testing.T) {
	const n = 20
	s, err := StartFanoutServer(FanoutServerOptions{Proxies: n, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if s.Empty.HeapInuse == 0 {
		t.Errorf("empty sample has no heap")
	}
	for _, delta := range []bool{true, false} {
		c, err := StartFanoutClients(context.Background(), FanoutClientOptions{Addr: s.Addr(), TrustDomain: s.TrustDomain(), Proxies: n, Delta: delta})
		if err != nil {
			t.Fatalf("delta=%v: %v", delta, err)
		}
		if err := s.WaitConnected(n); err != nil {
			t.Fatalf("delta=%v: %v", delta, err)
		}
		if got := s.Sample(); got.Connected != n || got.Goroutines < n {
			t.Errorf("delta=%v: server sample %+v, want %d connected and at least as many goroutines", delta, got, n)
		}
		c.Close()
	}
}

func TestStartFanoutClientsFailsClearly(t *testing.T) {
	s, err := StartFanoutServer(FanoutServerOptions{Proxies: 1, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	s.Close() // nothing listens any more
	_, err = StartFanoutClients(context.Background(), FanoutClientOptions{Addr: addr, TrustDomain: "td", Proxies: 3, Delta: true})
	if !errors.Is(err, ErrFanoutClients) {
		t.Fatalf("StartFanoutClients to a closed port = %v, want ErrFanoutClients", err)
	}
}

// TestMeasureFanoutMemory builds bench/cmd/xdsload and measures for real:
// the server and the proxies in two processes, the server's RSS read from
// /proc.
func TestMeasureFanoutMemory(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go toolchain not on PATH: cannot build xdsload")
	}
	bin, err := BuildXDSLoad(context.Background(), goBin, "..", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	m, err := MeasureFanoutMemory(context.Background(), bin, t.TempDir(), "delta", n)
	if err != nil {
		t.Fatal(err)
	}
	if m.Before.Heap.Connected != 0 || m.After.Heap.Connected != n {
		t.Errorf("connected before/after = %d/%d, want 0/%d", m.Before.Heap.Connected, m.After.Heap.Connected, n)
	}
	if m.Before.Proc.RSSBytes <= 0 || m.After.Proc.AnonBytes <= 0 || m.EmptyHeap == 0 {
		t.Errorf("samples missing: %+v", m)
	}
	if g := m.PerProxy().Goroutines; g < 1 {
		t.Errorf("server goroutines per connected proxy = %.1f, want at least 1 (a stream each)", g)
	}
	if _, err := MeasureFanoutMemory(context.Background(), bin, "", "rest", 1); err == nil || !strings.Contains(err.Error(), "-mode") {
		t.Errorf("bad mode: %v, want the client's flag error", err)
	}
}
