//go:build race

package sidecar

// raceEnabled: the race detector changes what escapes to the heap, so
// allocation budgets are checked without it.
const raceEnabled = true
