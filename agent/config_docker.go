package agent

import (
	"fmt"
	"slices"
	"strings"
	"time"

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
//	    allow_runtimes   = ["runc", "nvidia"]
//	    allowed_modes { pid = []  ipc = [] }
//	    volumes { enabled = false }
//	    gc {
//	      container = true
//	      image = true  image_delay = "3m"
//	      dangling_containers { enabled = true  period = "5m"  creation_grace = "5m"  dry_run = false }
//	    }
//	  }
//	}
//
// Any other key (auth, tls, infra_image, logging, extra_labels, ...) is
// an error at its position. Image GC only removes images the driver
// pulled or imported itself.
type DockerPluginConfig struct {
	Endpoint        string
	AllowPrivileged bool
	// AllowCaps nil means Nomad's default list (docker.DefaultCaps).
	AllowCaps      []string
	VolumesEnabled bool
	// GCContainer nil means true (remove a task's container with it).
	GCContainer *bool
	// GCImage nil means true; GCImageDelay 0 means 3m.
	GCImage      *bool
	GCImageDelay time.Duration
	// Dangling is gc { dangling_containers }.
	Dangling docker.DanglingConfig
	// AllowRuntimes nil means Nomad's default (runc, nvidia).
	AllowRuntimes []string
	// AllowedModes: "pid" and "ipc" mode globs allowed without
	// allow_privileged.
	AllowedModes map[string][]string
}

type fileDockerPlugin struct {
	Endpoint        *hcl.Attribute     `hcl:"endpoint"`
	AllowPrivileged *bool              `hcl:"allow_privileged,optional"`
	AllowCaps       *hcl.Attribute     `hcl:"allow_caps"`
	Volumes         *fileDockerVolumes `hcl:"volumes,block"`
	GC              *fileDockerGC      `hcl:"gc,block"`
	AllowRuntimes   *hcl.Attribute     `hcl:"allow_runtimes"`
	AllowedModes    *fileDockerModes   `hcl:"allowed_modes,block"`
}

type fileDockerModes struct {
	PID *hcl.Attribute `hcl:"pid"`
	IPC *hcl.Attribute `hcl:"ipc"`
}

type fileDockerVolumes struct {
	Enabled *bool `hcl:"enabled,optional"`
}

type fileDockerGC struct {
	Image      *bool               `hcl:"image,optional"`
	ImageDelay *hcl.Attribute      `hcl:"image_delay"`
	Container  *bool               `hcl:"container,optional"`
	Dangling   *fileDockerDangling `hcl:"dangling_containers,block"`
}

type fileDockerDangling struct {
	Enabled       *bool          `hcl:"enabled,optional"`
	Period        *hcl.Attribute `hcl:"period"`
	CreationGrace *hcl.Attribute `hcl:"creation_grace"`
	DryRun        *bool          `hcl:"dry_run,optional"`
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
	if diags := decodeDockerGC(f.GC, dc); diags.HasErrors() {
		return diags
	}
	if diags := decodeDockerGates(&f, dc); diags.HasErrors() {
		return diags
	}
	pc.Docker = dc
	return nil
}

// decodeDockerGC decodes the gc block (Nomad's defaults: image = true,
// image_delay = "3m", container = true, dangling_containers enabled every
// "5m" with a "5m" creation grace).
func decodeDockerGC(gc *fileDockerGC, dc *DockerPluginConfig) hcl.Diagnostics {
	if gc == nil {
		return nil
	}
	dc.GCContainer, dc.GCImage = gc.Container, gc.Image
	if diags := decodeDuration(gc.ImageDelay, "image_delay", &dc.GCImageDelay); diags.HasErrors() {
		return diags
	}
	if dg := gc.Dangling; dg != nil {
		dc.Dangling.Enabled = dg.Enabled
		dc.Dangling.DryRun = dg.DryRun != nil && *dg.DryRun
		if diags := decodeDuration(dg.Period, "period", &dc.Dangling.Period); diags.HasErrors() {
			return diags
		}
		if diags := decodeDuration(dg.CreationGrace, "creation_grace", &dc.Dangling.CreationGrace); diags.HasErrors() {
			return diags
		}
	}
	return nil
}

// decodeDuration decodes an optional positive duration such as "3m".
func decodeDuration(a *hcl.Attribute, name string, dst *time.Duration) hcl.Diagnostics {
	if a == nil {
		return nil
	}
	var s string
	if diags := decodeAttr(a, &s); diags.HasErrors() {
		return diags
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return attrDiag(a, "Invalid "+name, fmt.Sprintf("%s must be a positive duration such as \"3m\", not %q.", name, s))
	}
	*dst = d
	return nil
}

// decodeDockerGates decodes allow_runtimes and allowed_modes.
func decodeDockerGates(f *fileDockerPlugin, dc *DockerPluginConfig) hcl.Diagnostics {
	if a := f.AllowRuntimes; a != nil {
		if diags := decodeAttr(a, &dc.AllowRuntimes); diags.HasErrors() {
			return diags
		}
		if dc.AllowRuntimes == nil {
			dc.AllowRuntimes = []string{} // allow_runtimes = [] allows none
		}
	}
	if m := f.AllowedModes; m != nil {
		dc.AllowedModes = map[string][]string{}
		for _, kind := range []struct {
			name  string
			attr  *hcl.Attribute
			valid []string
		}{{"pid", m.PID, []string{"host"}}, {"ipc", m.IPC, []string{"none", "private", "shareable", "host"}}} {
			if kind.attr == nil {
				continue
			}
			var modes []string
			if diags := decodeAttr(kind.attr, &modes); diags.HasErrors() {
				return diags
			}
			for _, v := range modes {
				if !slices.Contains(kind.valid, v) && !(strings.HasPrefix(v, "container:") && len(v) > len("container:")) {
					return attrDiag(kind.attr, "Invalid allowed_modes", fmt.Sprintf("%q is not a valid %s_mode: use %s or \"container:<name>\" (\"*\" globs).", v, kind.name, strings.Join(kind.valid, ", ")))
				}
			}
			dc.AllowedModes[kind.name] = modes
		}
	}
	return nil
}

// dockerDriverConfig is the docker driver's configuration: its state under
// stateDir and the plugin "docker" options.
func (c *Config) dockerDriverConfig(stateDir string) docker.Config {
	dc := docker.Config{StateDir: stateDir}
	if p := c.Plugins[docker.Name].Docker; p != nil {
		dc.Endpoint, dc.AllowPrivileged, dc.AllowCaps = p.Endpoint, p.AllowPrivileged, p.AllowCaps
		dc.VolumesEnabled, dc.GCContainer = p.VolumesEnabled, p.GCContainer
		dc.AllowRuntimes, dc.AllowedModes = p.AllowRuntimes, p.AllowedModes
		dc.GCImage, dc.GCImageDelay, dc.Dangling = p.GCImage, p.GCImageDelay, p.Dangling
	}
	return dc
}
