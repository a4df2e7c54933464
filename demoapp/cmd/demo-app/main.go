// Command demo-app is `meshlet demo-app` alone: a small binary for the demo
// container image (e2e/framework.ImportDemoImage, scripts/demo.sh
// DRIVER=docker), built with CGO_ENABLED=0 so it is the image's only file.
package main

import (
	"os"

	"github.com/meshlet/meshlet/demoapp"
)

func main() { os.Exit(demoapp.Main(os.Args[1:], os.Stdout, os.Stderr)) }
