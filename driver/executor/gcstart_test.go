package executor

import (
	"os"
	"runtime/debug"
	"slices"
	"testing"
)

func TestLaunchEnvAndRestoreGC(t *testing.T) {
	t.Setenv("GOGC", "")
	env := LaunchEnv()
	if !slices.Contains(env, "GOGC=off") || !slices.Contains(env, initGCEnv+"=1") {
		t.Fatalf("without GOGC, LaunchEnv lacks GOGC=off and its marker: %q", env[len(env)-2:])
	}
	t.Setenv("GOGC", "200")
	if env := LaunchEnv(); slices.Contains(env, "GOGC=off") || slices.Contains(env, initGCEnv+"=1") {
		t.Fatal("LaunchEnv overrode the operator's GOGC")
	}

	prev := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(prev)
	// An operator's GOGC=off (no marker) stays.
	t.Setenv("GOGC", "off")
	t.Setenv(initGCEnv, "")
	restoreGC()
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Fatalf("restoreGC without the marker set GOGC to %d", got)
	}
	t.Setenv(initGCEnv, "1")
	restoreGC()
	if got := debug.SetGCPercent(-1); got != defaultGCPercent {
		t.Fatalf("restoreGC left GOGC at %d, want %d", got, defaultGCPercent)
	}
	for _, k := range []string{"GOGC", initGCEnv} {
		if v, ok := os.LookupEnv(k); ok {
			t.Errorf("restoreGC left %s=%q for the executor's children", k, v)
		}
	}
}
