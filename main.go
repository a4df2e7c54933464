// Command meshlet is a single-node Nomad-style agent with a built-in
// service mesh. All logic lives in package command.
package main

import (
	"os"

	"github.com/meshlet/meshlet/command"
)

func main() { os.Exit(command.Run(os.Args[1:])) }
