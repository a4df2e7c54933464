package agent

import (
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"

	"github.com/meshlet/meshlet/driver/docker"
)

// DockerPluginConfig is the part of Nomad's docker plugin config meshlet
// implements:
//
//	plugin "docker" {
//	  config {
//	    endpoint         = "unix:///var/run/docker.sock"
//	    allow_privileged = false
//	    allow_caps       = ["audit_write", "chown", ...]
//	    volumes { enabled = false }
//	    gc { container = true  image = true }
//	  }
//	}
//
// Any other key (auth, tls, infra_image, logging, extra_labels, ...) is
// an error at its position. gc.image is accepted for compatibility:
// meshlet never removes images.
type DockerPluginConfig struct {
	Endpoint        string
	AllowPrivileged bool
	// AllowCaps nil means Nomad's default list (docker.DefaultCaps).
	AllowCaps      []string
	VolumesEnabled bool
	// GCContainer nil means true (remove a task's container with it).
	GCContainer *bool
}

type fileDockerPlugin struct {
	Endpoint        *hcl.Attribute     `hcl:"endpoint"`
	AllowPrivileged *bool              `hcl:"allow_privileged,optional"`
	AllowCaps       *hcl.Attribute     `hcl:"allow_caps"`
	Volumes         *fileDockerVolumes `hcl:"volumes,block"`
	GC              *fileDockerGC      `hcl:"gc,block"`
}

type fileDockerVolumes struct {
	Enabled *bool `hcl:"enabled,optional"`
}

type fileDockerGC struct {
	Image     *bool `hcl:"image,optional"`
	Container *bool `hcl:"container,optional"`
}

// decodeDockerPlugin decodes a plugin "docker" config body into pc.Docker;
// every refused key or value is a diagnostic at its position.
func decodeDockerPlugin(body hcl.Body, pc *PluginConfig) hcl.Diagnostics {
	var f fileDockerPlugin
	if diags := gohcl.DecodeBody(body, nil, &f); diags.HasErrors() {
		return diags
	}
	dc := &DockerPluginConfig{}
	if diags := decodeAttr(f.Endpoint, &dc.Endpoint); diags.HasErrors() {
		return diags
	}
	if f.Endpoint != nil && !strings.HasPrefix(dc.Endpoint, "unix://") && !strings.HasPrefix(dc.Endpoint, "tcp://") {
		return attrDiag(f.Endpoint, "Invalid endpoint", `endpoint must be "unix:///path/to/docker.sock" or "tcp://host:port".`)
	}
	if f.AllowPrivileged != nil {
		dc.AllowPrivileged = *f.AllowPrivileged
	}
	if a := f.AllowCaps; a != nil {
		if diags := decodeAttr(a, &dc.AllowCaps); diags.HasErrors() {
			return diags
		}
		if v, _ := a.Expr.Value(nil); !v.IsNull() && dc.AllowCaps == nil {
			dc.AllowCaps = []string{} // allow_caps = [] allows nothing
		}
		if err := docker.CheckCaps(dc.AllowCaps); err != nil {
			return attrDiag(a, "Invalid allow_caps", "allow_caps configured with "+err.Error()+".")
		}
	}
	if f.Volumes != nil && f.Volumes.Enabled != nil {
		dc.VolumesEnabled = *f.Volumes.Enabled
	}
	if f.GC != nil {
		dc.GCContainer = f.GC.Container
	}
	pc.Docker = dc
	return nil
}

// dockerDriverConfig is the docker driver's configuration: its state under
// stateDir and the plugin "docker" options.
func (c *Config) dockerDriverConfig(stateDir string) docker.Config {
	dc := docker.Config{StateDir: stateDir}
	if p := c.Plugins[docker.Name].Docker; p != nil {
		dc.Endpoint, dc.AllowPrivileged, dc.AllowCaps = p.Endpoint, p.AllowPrivileged, p.AllowCaps
		dc.VolumesEnabled, dc.GCContainer = p.VolumesEnabled, p.GCContainer
	}
	return dc
}
