package executor

import (
	"os"
	"runtime/debug"
)

// initGCEnv marks the GOGC=off that LaunchEnv adds, so that Main undoes
// only that one and never a GOGC=off the operator set.
const initGCEnv = "MESHLET_EXECUTOR_INIT_GC"

// defaultGCPercent is Go's default GOGC, which the executor runs with
// once started.
const defaultGCPercent = 100

// LaunchEnv returns the environment a driver launches the executor with:
// its own, plus GOGC=off for the executor's start-up when it does not set
// GOGC. The executor is the whole meshlet binary: its package
// initialisation allocates ~5 MB, which with the default GOGC runs
// garbage collections that cost each task start a quarter of its start-up
// CPU (~8 of ~28 ms here) for nothing it keeps. Main restores the default
// as its first step; the task's environment is the spec's, never this one.
func LaunchEnv() []string {
	env := os.Environ()
	if os.Getenv("GOGC") != "" {
		return env
	}
	return append(env, "GOGC=off", initGCEnv+"=1")
}

// restoreGC undoes what LaunchEnv added: the default GOGC from now on,
// and neither variable left for the executor's own children.
func restoreGC() {
	if os.Getenv(initGCEnv) == "" {
		return
	}
	debug.SetGCPercent(defaultGCPercent)
	_ = os.Unsetenv("GOGC")
	_ = os.Unsetenv(initGCEnv)
}
