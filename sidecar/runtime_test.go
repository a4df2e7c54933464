package sidecar

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestTuneRuntime(t *testing.T) {
	prevGC := debug.SetGCPercent(100)
	prevLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		debug.SetGCPercent(prevGC)
		debug.SetMemoryLimit(prevLimit)
	})
	limit := func() (int64, bool) { return 128 << 20, true }
	env := func(vals map[string]string) func(string) string {
		return func(k string) string { return vals[k] }
	}

	s := tuneRuntime(env(nil), limit)
	if s.GCPercent != DefaultGCPercent || s.MemLimit != 96<<20 {
		t.Fatalf("defaults: got %+v", s)
	}
	if got := debug.SetGCPercent(100); got != DefaultGCPercent {
		t.Fatalf("GOGC in effect = %d, want %d", got, DefaultGCPercent)
	}
	if got := debug.SetMemoryLimit(-1); got != 96<<20 {
		t.Fatalf("memory limit in effect = %d, want %d", got, 96<<20)
	}

	debug.SetMemoryLimit(math.MaxInt64)
	s = tuneRuntime(env(map[string]string{"GOGC": "200", "GOMEMLIMIT": "1GiB"}), limit)
	if s.GCPercent != -1 || s.MemLimit != 0 {
		t.Fatalf("environment set: got %+v, want nothing applied", s)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC changed to %d although the environment sets it", got)
	}

	s = tuneRuntime(env(nil), func() (int64, bool) { return 0, false })
	if s.MemLimit != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Fatalf("no cgroup limit: got %+v", s)
	}
}

func TestParseMemoryMax(t *testing.T) {
	for in, want := range map[string]int64{"134217728\n": 134217728, "max\n": 0, "": 0, "-1": 0} {
		got, ok := parseMemoryMax(in)
		if got != want || ok != (want > 0) {
			t.Errorf("parseMemoryMax(%q) = %d, %v", in, got, ok)
		}
	}
}
