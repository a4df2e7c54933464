package agent

import (
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"

	"github.com/meshlet/meshlet/client"
	"github.com/meshlet/meshlet/driver/connectproxy"
)

// ConnectProxyPluginConfig is the connect_proxy driver's node-side choice of
// sidecar runtime:
//
//	plugin "connect_proxy" {
//	  config {
//	    runtimes         = ["docker", "envoy", "builtin"]
//	    envoy_image      = "envoyproxy/envoy:v1.34.1"
//	    envoy_image_pull = false
//	  }
//	}
//
// Any other key is an error at its position. envoy_image defaults to the
// agent's connect { sidecar_image }, else connect.DefaultSidecarImage; an
// image configured in either place may be pulled (envoy_image_pull
// defaults to true), the default one is used only where present.
type ConnectProxyPluginConfig struct {
	// Runtimes nil means connectproxy.DefaultRuntimes.
	Runtimes   []string
	EnvoyImage string
	// EnvoyImagePull nil means: pull a configured image, not the default.
	EnvoyImagePull *bool
}

type fileConnectProxyPlugin struct {
	Runtimes       *hcl.Attribute `hcl:"runtimes"`
	EnvoyImage     *hcl.Attribute `hcl:"envoy_image"`
	EnvoyImagePull *bool          `hcl:"envoy_image_pull,optional"`
}

// decodeConnectProxyPlugin decodes a plugin "connect_proxy" config body into
// pc.ConnectProxy; a refused key or value is a diagnostic at its position.
func decodeConnectProxyPlugin(body hcl.Body, pc *PluginConfig) hcl.Diagnostics {
	var f fileConnectProxyPlugin
	if diags := gohcl.DecodeBody(body, nil, &f); diags.HasErrors() {
		return diags
	}
	cc := &ConnectProxyPluginConfig{}
	if a := f.Runtimes; a != nil {
		if diags := decodeAttr(a, &cc.Runtimes); diags.HasErrors() {
			return diags
		}
		if err := connectproxy.ValidateRuntimes(cc.Runtimes); err != nil {
			return attrDiag(a, "Invalid runtimes", err.Error()+".")
		}
	}
	if a := f.EnvoyImage; a != nil {
		if diags := decodeAttr(a, &cc.EnvoyImage); diags.HasErrors() {
			return diags
		}
		if cc.EnvoyImage == "" {
			return attrDiag(a, "Invalid envoy_image", "envoy_image must name an image.")
		}
	}
	cc.EnvoyImagePull = f.EnvoyImagePull
	pc.ConnectProxy = cc
	return nil
}

// connectProxyDriverConfig is the connect_proxy driver's configuration:
// the agent's binary, envoy and executor, its state under stateDir, the
// plugin "connect_proxy" options (see ConnectProxyPluginConfig for the
// image's defaults) and the node's docker driver (nil when disabled) for
// the docker runtime.
func (a *Agent) connectProxyDriverConfig(stateDir string, dockerDrv connectproxy.ContainerDriver) connectproxy.Config {
	c := connectproxy.Config{
		Binary: client.BinaryPath(a.cfg.BinaryPath), EnvoyBinary: a.envoyBinary, ExecutorCmd: a.cfg.ExecutorCmd,
		StateDir: stateDir, Docker: dockerDrv, EnvoyImage: a.cfg.Connect.SidecarImage,
	}
	var pull *bool
	if p := a.cfg.Plugins[connectproxy.Name].ConnectProxy; p != nil {
		c.Runtimes, pull = p.Runtimes, p.EnvoyImagePull
		if p.EnvoyImage != "" {
			c.EnvoyImage = p.EnvoyImage
		}
	}
	c.EnvoyImagePull = c.EnvoyImage != "" // a configured image may be pulled
	if pull != nil {
		c.EnvoyImagePull = *pull
	}
	return c
}
