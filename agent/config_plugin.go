package agent

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"

	"github.com/meshlet/meshlet/driver/connectproxy"
	"github.com/meshlet/meshlet/driver/docker"
	"github.com/meshlet/meshlet/driver/exec"
	"github.com/meshlet/meshlet/driver/rawexec"
)

// PluginConfig is one of Nomad's plugin "NAME" { args, config { } } blocks.
// Only the built-in drivers' config is understood: raw_exec's enabled
// (raw_exec is off unless enabled here, by the legacy client option
// driver.raw_exec.enable or by -dev), exec's options (ExecPluginConfig) and
// docker's (DockerPluginConfig) and connect_proxy's sidecar runtimes
// (ConnectProxyPluginConfig). External plugins get neither args
// nor config; the agent warns when a block names no driver.
type PluginConfig struct {
	Args []string
	// Enabled is raw_exec's config { enabled = BOOL }; nil = not set.
	Enabled *bool
	// Exec is exec's config (see ExecPluginConfig); nil = not set.
	Exec *ExecPluginConfig
	// Docker is docker's config (see DockerPluginConfig); nil = not set.
	Docker *DockerPluginConfig
	// ConnectProxy is connect_proxy's config (see
	// ConnectProxyPluginConfig); nil = not set.
	ConnectProxy *ConnectProxyPluginConfig
	// HasConfig: the block has a config block.
	HasConfig bool
}

type filePlugin struct {
	Name   string            `hcl:"name,label"`
	Args   []string          `hcl:"args,optional"`
	Config *filePluginConfig `hcl:"config,block"`
}

type filePluginConfig struct {
	Remain hcl.Body `hcl:",remain"`
}

// rawExecPluginConfig is the part of Nomad's raw_exec plugin config meshlet
// implements; any other key is an error with its position.
type rawExecPluginConfig struct {
	Enabled *bool `hcl:"enabled"`
}

// applyPlugins decodes the plugin blocks into c.Plugins. A name given twice
// is an error, as in Nomad.
func applyPlugins(filename string, blocks []*filePlugin, c *Config) error {
	for _, p := range blocks {
		if _, dup := c.Plugins[p.Name]; dup {
			return fmt.Errorf("%s: invalid agent configuration: plugin %q is configured more than once", filename, p.Name)
		}
		pc := PluginConfig{Args: p.Args, HasConfig: p.Config != nil}
		if p.Config != nil && p.Config.Remain != nil {
			var diags hcl.Diagnostics
			switch p.Name {
			case rawexec.Name:
				var rc rawExecPluginConfig
				diags = gohcl.DecodeBody(p.Config.Remain, nil, &rc)
				pc.Enabled = rc.Enabled
			case exec.Name:
				diags = decodeExecPlugin(p.Config.Remain, &pc)
			case docker.Name:
				diags = decodeDockerPlugin(p.Config.Remain, &pc)
			case connectproxy.Name:
				diags = decodeConnectProxyPlugin(p.Config.Remain, &pc)
			}
			if diags.HasErrors() {
				return diagError(diags)
			}
		}
		if c.Plugins == nil {
			c.Plugins = map[string]PluginConfig{}
		}
		c.Plugins[p.Name] = pc
	}
	return nil
}
