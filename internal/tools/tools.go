//go:build tools

// Package tools pins build-time dependencies: the CNI plugins that `make`
// builds into bin/cni from the module cache, and the linters `make lint` runs.
package tools

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
	_ "github.com/containernetworking/plugins/plugins/meta/firewall"
	_ "github.com/containernetworking/plugins/plugins/meta/portmap"
	_ "honnef.co/go/tools/cmd/staticcheck"
)
