//go:build !race

package cni

const raceEnabled = false
