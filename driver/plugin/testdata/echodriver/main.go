// Command echodriver is a test driver plugin: raw_exec served under the
// name "echo". It doubles as its own executor ("echodriver executor ...").
// ECHO_STATE_DIR sets the driver's state directory.
package main

import (
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/driver/executor"
	"github.com/meshlet/meshlet/driver/plugin"
	"github.com/meshlet/meshlet/driver/rawexec"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "executor" {
		os.Exit(executor.Main(os.Args[2:]))
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "echo", Output: os.Stderr, JSONFormat: true})
	plugin.Serve(rawexec.New(rawexec.Config{Name: "echo", StateDir: os.Getenv("ECHO_STATE_DIR")}, logger))
}
