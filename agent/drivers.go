package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/meshlet/meshlet/client"
	"github.com/meshlet/meshlet/cni"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/connectproxy"
	"github.com/meshlet/meshlet/driver/docker"
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
// connect_proxy, which runs connect sidecars and nothing else, is always
// enabled; docker is enabled unless the client option driver.docker.enable
// is false, and detected only where its daemon answers. The cleanup also
// detaches the docker driver from its containers, which keep running.
func (a *Agent) loadDrivers() ([]driver.Driver, func(), error) {
	stateDir := filepath.Join(a.cfg.DataDir, "drivers")
	var dockerDrv *docker.Driver
	var sidecarDocker connectproxy.ContainerDriver // no typed nil
	if a.enabled("driver.docker.enable", true) {
		// Detected only where the daemon answers (as Nomad), so nodes
		// without docker get no docker tasks.
		dockerDrv = docker.New(a.cfg.dockerDriverConfig(filepath.Join(stateDir, docker.Name)), a.logger.Named("driver").Named(docker.Name))
		sidecarDocker = dockerDrv
	}
	out := []driver.Driver{connectproxy.New(a.connectProxyDriverConfig(filepath.Join(stateDir, connectproxy.Name), sidecarDocker),
		a.logger.Named("driver").Named(connectproxy.Name))}
	var raw driver.Driver = rawexec.New(rawexec.Config{ExecutorCmd: a.cfg.ExecutorCmd,
		StateDir: filepath.Join(stateDir, rawexec.Name)}, a.logger.Named("driver").Named(rawexec.Name))
	if !a.rawExecEnabled() {
		raw = disabledDriver{Driver: raw, hint: `plugin "raw_exec" { config { enabled = true } } in the agent config`}
		a.logger.Info("raw_exec driver disabled; enable it with plugin \"raw_exec\" { config { enabled = true } }")
	}
	out = append(out, raw)
	if a.enabled("driver.exec.enable", true) {
		execCfg, err := a.newExecDriverConfig(filepath.Join(stateDir, exec.Name))
		if err != nil {
			return nil, nil, err
		}
		out = append(out, exec.New(execCfg, a.logger.Named("driver").Named(exec.Name)))
	}
	if dockerDrv != nil {
		out = append(out, dockerDrv)
	}
	plugins, cleanup, err := loadPlugins(a.cfg.PluginDir, a.logger)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to load driver plugins from %s: %w", a.cfg.PluginDir, err)
	}
	out = append(out, plugins...)
	a.warnUnusedPlugins(out)
	if dockerDrv != nil {
		stopPlugins := cleanup
		cleanup = func() {
			// Containers keep running; their logs resume after a restart.
			if err := dockerDrv.Close(); err != nil {
				a.logger.Warn("failed to close docker client", "error", err)
			}
			if stopPlugins != nil {
				stopPlugins()
			}
		}
	}
	return out, cleanup, nil
}

// rawExecEnabled: a plugin "raw_exec" block's enabled wins, then the legacy
// client option driver.raw_exec.enable; otherwise only dev mode enables
// raw_exec (Nomad's defaults).
func (a *Agent) rawExecEnabled() bool {
	if p, ok := a.cfg.Plugins[rawexec.Name]; ok && p.Enabled != nil {
		return *p.Enabled
	}
	return a.enabled("driver.raw_exec.enable", a.cfg.Dev)
}

// warnUnusedPlugins warns about plugin blocks that name no loaded driver
// (Nomad ignores them too) and about args or config meshlet does not pass
// to external plugins.
func (a *Agent) warnUnusedPlugins(drivers []driver.Driver) {
	builtin := map[string]bool{rawexec.Name: true, exec.Name: true, connectproxy.Name: true, docker.Name: true}
	loaded := map[string]bool{}
	for _, d := range drivers {
		loaded[d.Name()] = true
	}
	for name, p := range a.cfg.Plugins {
		switch {
		case !loaded[name]:
			a.logger.Warn("plugin block names no loaded driver; ignoring it", "plugin", name)
		case !builtin[name] && (len(p.Args) > 0 || p.HasConfig):
			a.logger.Warn("external plugins get no args or config; ignoring them", "plugin", name)
		}
	}
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
