package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/meshlet/meshlet/client"
	"github.com/meshlet/meshlet/cni"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/exec"
	"github.com/meshlet/meshlet/driver/rawexec"
)

// enabled reads a boolean client option, defaulting to def.
func (a *Agent) enabled(option string, def bool) bool {
	v, ok := a.cfg.Client.Options[option]
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		a.logger.Warn("ignoring non-boolean client option", "option", option, "value", v)
		return def
	}
	return b
}

// loadDrivers returns the built-in drivers that are enabled plus the
// external plugins in plugin_dir, and a cleanup that stops the plugins.
func (a *Agent) loadDrivers() ([]driver.Driver, func(), error) {
	stateDir := filepath.Join(a.cfg.DataDir, "drivers")
	var out []driver.Driver
	if a.enabled("driver.raw_exec.enable", true) {
		out = append(out, rawexec.New(rawexec.Config{ExecutorCmd: a.cfg.ExecutorCmd,
			StateDir: filepath.Join(stateDir, rawexec.Name)}, a.logger.Named("driver").Named(rawexec.Name)))
	}
	if a.enabled("driver.exec.enable", true) {
		out = append(out, exec.New(exec.Config{ExecutorCmd: a.cfg.ExecutorCmd,
			StateDir: filepath.Join(stateDir, exec.Name)}, a.logger.Named("driver").Named(exec.Name)))
	}
	plugins, cleanup, err := loadPlugins(a.cfg.PluginDir, a.logger)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to load driver plugins from %s: %w", a.cfg.PluginDir, err)
	}
	return append(out, plugins...), cleanup, nil
}

// newNetworker builds the CNI manager, or explains why bridge networking is
// unavailable (allocations that need it then fail with that reason).
func (a *Agent) newNetworker() (client.Networker, string) {
	if os.Geteuid() != 0 {
		return nil, "bridge networking needs root; run the agent as root"
	}
	m, err := cni.New(cni.Config{
		PluginDir:   a.cfg.Client.CNIPath,
		ConfigDir:   a.cfg.Client.CNIConfigDir,
		BridgeName:  a.cfg.Client.BridgeNetworkName,
		NetworkName: a.cfg.Client.BridgeNetworkName,
		Subnet:      a.cfg.Client.BridgeNetworkSubnet,
		StateDir:    filepath.Join(a.cfg.DataDir, "cni"),
	}, a.logger) // cni.New names its logger "cni"
	if err != nil {
		a.logger.Warn("bridge networking unavailable", "error", err)
		return nil, err.Error()
	}
	return m, ""
}
