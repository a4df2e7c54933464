//go:build race

package cni

// raceEnabled: the race detector slows each plugin exec's bookkeeping
// down; long loops run fewer rounds (their leak checks stay the same).
const raceEnabled = true
