// Command benchrun runs meshlet's benchmarks and writes bench/RESULTS.md
// and bench/results.json; `make bench` runs it through scripts/bench.sh.
// All logic lives in package bench.
package main

import (
	"os"

	"github.com/meshlet/meshlet/bench"
)

func main() { os.Exit(bench.Main(os.Args[1:], os.Stdout, os.Stderr)) }
