// Command xdsload is one side of the benchmark harness's out-of-process
// xDS fan-out measurement (the control plane, or N simulated proxies); the
// harness starts it twice and drives it over stdin/stdout. It is not a
// user-facing command. All logic lives in package bench (bench.XDSLoad).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/meshlet/meshlet/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := bench.XDSLoad(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "xdsload:", err)
		os.Exit(1)
	}
}
