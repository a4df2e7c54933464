package faults

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// The tests assert outcomes; they also print the figures of `make bench`'s
// Faults area as "FAULTFIG <key> <value>" lines, which bench/faults.go
// reads. The bench runs them longer through these variables.
const figPrefix = "FAULTFIG"

// figure records one value for the bench report.
func figure(t *testing.T, key string, v float64) {
	t.Helper()
	t.Logf("%s %s %g", figPrefix, key, v)
}

// outage is how long the control plane stays away in the outage phase
// (MESHLET_FAULTS_OUTAGE, a Go duration; the bench uses 60s).
func outage() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("MESHLET_FAULTS_OUTAGE")); err == nil && d > 0 {
		return d
	}
	return 8 * time.Second
}

// cycleCount is how many start/stop cycles run (MESHLET_FAULTS_CYCLES; the
// bench uses 1000).
func cycleCount() int {
	if n, err := strconv.Atoi(os.Getenv("MESHLET_FAULTS_CYCLES")); err == nil && n > 0 {
		return n
	}
	return 8
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
