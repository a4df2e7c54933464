package agent

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"

	"github.com/meshlet/meshlet/driver/exec"
)

// ExecPluginConfig is the part of Nomad's exec plugin config meshlet
// implements:
//
//	plugin "exec" {
//	  config {
//	    allow_caps       = ["audit_write", "chown", ..., "net_raw"]
//	    default_pid_mode = "private"
//	    default_ipc_mode = "private"
//	    no_pivot_root    = false
//	  }
//	}
//
// AllowCaps nil means Nomad's default list (exec.DefaultCaps). The modes
// are "private" or "host" ("" means private). no_pivot_root = true and
// denied_host_uids / denied_host_gids are errors: meshlet always pivots
// and does not check host IDs.
type ExecPluginConfig struct {
	AllowCaps      []string
	DefaultPIDMode string
	DefaultIPCMode string
}

type fileExecPlugin struct {
	AllowCaps      *hcl.Attribute `hcl:"allow_caps"`
	DefaultPIDMode *hcl.Attribute `hcl:"default_pid_mode"`
	DefaultIPCMode *hcl.Attribute `hcl:"default_ipc_mode"`
	NoPivotRoot    *hcl.Attribute `hcl:"no_pivot_root"`
	DeniedHostUIDs *hcl.Attribute `hcl:"denied_host_uids"`
	DeniedHostGIDs *hcl.Attribute `hcl:"denied_host_gids"`
}

// decodeExecPlugin decodes a plugin "exec" config body into pc.Exec;
// every refused key or value is a diagnostic at its position.
func decodeExecPlugin(body hcl.Body, pc *PluginConfig) hcl.Diagnostics {
	var f fileExecPlugin
	if diags := gohcl.DecodeBody(body, nil, &f); diags.HasErrors() {
		return diags
	}
	for _, a := range []*hcl.Attribute{f.DeniedHostUIDs, f.DeniedHostGIDs} {
		if a != nil {
			return attrDiag(a, "Unsupported exec plugin option",
				fmt.Sprintf("%s is not supported by meshlet's exec driver; remove it.", a.Name))
		}
	}
	var noPivot bool
	if diags := decodeAttr(f.NoPivotRoot, &noPivot); diags.HasErrors() {
		return diags
	}
	if noPivot {
		return attrDiag(f.NoPivotRoot, "Unsupported no_pivot_root",
			"meshlet's exec driver always uses pivot_root; no_pivot_root = true is not supported.")
	}
	ec := &ExecPluginConfig{}
	if a := f.AllowCaps; a != nil {
		if diags := decodeAttr(a, &ec.AllowCaps); diags.HasErrors() {
			return diags
		}
		if v, _ := a.Expr.Value(nil); !v.IsNull() && ec.AllowCaps == nil {
			ec.AllowCaps = []string{} // allow_caps = [] allows nothing
		}
		if err := exec.CheckCaps(ec.AllowCaps); err != nil {
			return attrDiag(a, "Invalid allow_caps", "allow_caps configured with "+err.Error()+".")
		}
	}
	for _, m := range []struct {
		attr *hcl.Attribute
		dst  *string
	}{{f.DefaultPIDMode, &ec.DefaultPIDMode}, {f.DefaultIPCMode, &ec.DefaultIPCMode}} {
		if diags := decodeAttr(m.attr, m.dst); diags.HasErrors() {
			return diags
		}
		if err := exec.CheckMode(*m.dst); err != nil {
			return attrDiag(m.attr, "Invalid "+m.attr.Name, m.attr.Name+" "+err.Error()+".")
		}
	}
	pc.Exec = ec
	return nil
}

// decodeAttr decodes a set, non-null attribute into dst.
func decodeAttr(a *hcl.Attribute, dst any) hcl.Diagnostics {
	if a == nil {
		return nil
	}
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() || v.IsNull() {
		return diags
	}
	return gohcl.DecodeExpression(a.Expr, nil, dst)
}

// attrDiag is one error at a's value.
func attrDiag(a *hcl.Attribute, summary, detail string) hcl.Diagnostics {
	return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: a.Expr.Range().Ptr()}}
}

// applyChrootEnv decodes client.chroot_env, a map of host path to path in
// the task's root, into c.ChrootEnv. (Nomad's HCL1 block form,
// chroot_env { "/bin" = "/bin" }, is not HCL2: write chroot_env = { ... }.)
// An empty map means the default set, as in Nomad.
func applyChrootEnv(a *hcl.Attribute, c *ClientConfig) error {
	var env map[string]string
	if diags := decodeAttr(a, &env); diags.HasErrors() {
		return diagError(diags)
	}
	if len(env) == 0 {
		return nil
	}
	if err := exec.CheckChrootEnv(env); err != nil {
		return diagError(attrDiag(a, "Invalid chroot_env", err.Error()+"."))
	}
	c.ChrootEnv = env
	return nil
}

// execProblems checks the exec driver's options set in code (the file's
// are checked as they are decoded, with their positions) and that no
// chroot_env entry would show tasks the data dir.
func (c *Config) execProblems() []string {
	var out []string
	ec := c.execDriverConfig("")
	if err := ec.Validate(); err != nil {
		out = append(out, err.Error())
	}
	if c.DataDir != "" {
		out = append(out, chrootEnvDataDirProblems(c.Client.ChrootEnv, c.DataDir)...)
	}
	return out
}

// chrootEnvDataDirProblems: a chroot_env source that holds the data dir,
// or lies inside it, would bind every allocation's files (secrets
// included) into each task.
func chrootEnvDataDirProblems(env map[string]string, dataDir string) []string {
	data := resolvePath(dataDir)
	var out []string
	for src := range env {
		s := resolvePath(src)
		if s == data || strings.HasPrefix(data, s+"/") || strings.HasPrefix(s, data+"/") {
			out = append(out, fmt.Sprintf("client.chroot_env %q overlaps data_dir %s: tasks would see every allocation's files", src, dataDir))
		}
	}
	return out
}

// resolvePath is p absolute, cleaned, with symbolic links resolved when it
// exists.
func resolvePath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

// execDriverConfig is the exec driver's configuration: its state under
// stateDir, the agent's executor, the plugin "exec" options and the
// client's chroot_env.
func (c *Config) execDriverConfig(stateDir string) exec.Config {
	ec := exec.Config{ExecutorCmd: c.ExecutorCmd, StateDir: stateDir, ChrootEnv: c.Client.ChrootEnv}
	if p := c.Plugins[exec.Name].Exec; p != nil {
		ec.AllowCaps, ec.DefaultPIDMode, ec.DefaultIPCMode = p.AllowCaps, p.DefaultPIDMode, p.DefaultIPCMode
	}
	return ec
}

// newExecDriverConfig is execDriverConfig for the running agent, whose
// data dir is now known (a dev agent makes a temporary one at start).
func (a *Agent) newExecDriverConfig(stateDir string) (exec.Config, error) {
	if p := chrootEnvDataDirProblems(a.cfg.Client.ChrootEnv, a.cfg.DataDir); len(p) > 0 {
		return exec.Config{}, fmt.Errorf("invalid agent configuration: %s", strings.Join(p, "; "))
	}
	return a.cfg.execDriverConfig(stateDir), nil
}
