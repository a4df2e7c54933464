package lazyre

import (
	"runtime"
	"testing"
)

func TestMatchesAsCompiled(t *testing.T) {
	re := New(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	for s, want := range map[string]bool{"web": true, "a": true, "-web": false, "web-": false, "": false, "WEB": false} {
		if got := re.MatchString(s); got != want {
			t.Errorf("MatchString(%q) = %v, want %v", s, got, want)
		}
	}
	sub := New(`name: "([^"]*)" id: "([^"]*)"`)
	if m := sub.FindStringSubmatch(`name: "bridge" id: "abc"`); len(m) != 3 || m[1] != "bridge" || m[2] != "abc" {
		t.Errorf("FindStringSubmatch = %q", m)
	}
}

func TestNewPanicsOnBadExpression(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a malformed expression was accepted")
		}
	}()
	New(`^[a-z`)
}

// TestNothingCompiledUntilUsed: New keeps no compiled program alive (the
// point of the package); the first use compiles it.
func TestNothingCompiledUntilUsed(t *testing.T) {
	live := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := live()
	re := New(`^[a-z0-9](?:[a-z0-9_-]{0,254}[a-z0-9])?$`)
	unused := live()
	re.MatchString("x")
	used := live()
	runtime.KeepAlive(re)
	if unused > before+4<<10 {
		t.Errorf("New kept %d bytes alive before any use", unused-before)
	}
	if used < unused+8<<10 {
		t.Errorf("the compiled program (%d bytes) is smaller than expected: was it compiled at New?", used-unused)
	}
}
