package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/client"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/internal/launch"
)

// Paths of the task's directories inside its container (as Nomad's).
const (
	containerAllocDir   = "/alloc"
	containerLocalDir   = "/local"
	containerSecretsDir = "/secrets"
)

// ErrImagePull wraps a failure to pull an image that is not present.
var ErrImagePull = errors.New("failed to pull image")

// minCPUShares is the kernel's floor for cpu.shares.
const minCPUShares = 2

// ensureImage makes sure the image is present: pulled when missing or when
// force_pull, within image_pull_timeout.
func (d *Driver) ensureImage(ctx context.Context, c *client.Client, tc *taskConfig) error {
	ctx, cancel := context.WithTimeout(ctx, tc.PullTimeout)
	defer cancel()
	if !tc.ForcePull {
		if _, err := c.ImageInspect(ctx, tc.Image); err == nil {
			return nil
		} else if !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("failed to inspect image %s: %w", tc.Image, err)
		}
	}
	var opts image.PullOptions
	if a := tc.Auth; a != nil {
		enc, err := registry.EncodeAuthConfig(registry.AuthConfig{Username: a.Username, Password: a.Password, ServerAddress: a.ServerAddress})
		if err != nil {
			return fmt.Errorf("%w %s: %w", ErrImagePull, tc.Image, err)
		}
		opts.RegistryAuth = enc
	}
	rc, err := c.ImagePull(ctx, tc.Image, opts)
	if err != nil {
		return pullError(ctx, tc, err)
	}
	defer rc.Close()
	// The pull reports failures inside its JSON progress stream.
	body, err := io.ReadAll(rc)
	if err != nil {
		return pullError(ctx, tc, err)
	}
	if i := strings.LastIndex(string(body), `"error":`); i >= 0 {
		return fmt.Errorf("%w %s: %s", ErrImagePull, tc.Image, strings.TrimSpace(string(body[i:])))
	}
	d.images.pulled(tc.Image)
	return nil
}

// pullError wraps a failed pull; one cut by image_pull_timeout says so
// instead of quoting the client's request URL.
func pullError(ctx context.Context, tc *taskConfig, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w %s: not pulled within image_pull_timeout (%s): %w", ErrImagePull, tc.Image, tc.PullTimeout, context.DeadlineExceeded)
	}
	return fmt.Errorf("%w %s: %w", ErrImagePull, tc.Image, err)
}

// containerSpec builds the container's config and host config.
// netMode is the container's network mode: "host", "none" or
// "container:<pause>"; an is the allocation's network when it joins the
// pause container's (nil otherwise).
func (d *Driver) containerSpec(cfg *driver.TaskConfig, tc *taskConfig, caps []string, netMode string, an *allocNet) (*container.Config, *container.HostConfig, error) {
	labels := map[string]string{}
	maps.Copy(labels, tc.Labels)
	maps.Copy(labels, map[string]string{LabelAllocID: cfg.AllocID, LabelTask: cfg.Name, LabelTaskID: cfg.ID, LabelJob: cfg.JobName, LabelOwner: d.owner()})
	cc := &container.Config{
		Image:      tc.Image,
		Entrypoint: tc.Entrypoint,
		WorkingDir: tc.WorkDir,
		User:       cfg.User,
		Env:        containerEnv(cfg),
		Labels:     labels,
	}
	if tc.Command != "" {
		cc.Cmd = append([]string{tc.Command}, tc.Args...)
	} else if len(tc.Args) > 0 {
		cc.Cmd = tc.Args
	}
	hc := &container.HostConfig{
		Binds:       taskBinds(cfg),
		NetworkMode: container.NetworkMode(netMode),
		Privileged:  tc.Privileged,
		CapDrop:     []string{"ALL"},
		CapAdd:      caps,
		LogConfig:   container.LogConfig{Type: "json-file", Config: tc.LogConfig},
		Resources:   containerResources(cfg.Resources),
	}
	if tc.Privileged {
		hc.CapDrop, hc.CapAdd = nil, nil
	}
	if !d.cfg.VolumesEnabled {
		if err := checkSourcesBeneath(cfg.TaskDir, tc); err != nil {
			return nil, nil, err
		}
	}
	for _, v := range tc.Volumes {
		b, err := volumeBind(cfg.TaskDir, v)
		if err != nil {
			return nil, nil, err
		}
		hc.Binds = append(hc.Binds, b)
	}
	for _, mt := range tc.Mounts {
		hc.Mounts = append(hc.Mounts, containerMount(cfg.TaskDir, mt))
	}
	if tc.Options.CpusetCPUs != "" {
		d.logger.Warn("cpuset_cpus is not supported and is ignored, as in Nomad", "alloc_id", cfg.AllocID, "task", cfg.Name)
	}
	for _, s := range tc.Options.DroppedDNS {
		d.logger.Error("invalid ip address for container dns server, dropped", "alloc_id", cfg.AllocID, "task", cfg.Name, "ip", s)
	}
	if err := applyOptions(&tc.Options, cfg.TaskDir, an, cfg.NetworkDNS, cc, hc); err != nil {
		return nil, nil, err
	}
	return cc, hc, nil
}

// taskBinds binds the alloc dir at /alloc and the task's local/ and
// secrets/ at /local and /secrets.
func taskBinds(cfg *driver.TaskConfig) []string {
	var binds []string
	if cfg.AllocDir != "" {
		binds = append(binds, cfg.AllocDir+":"+containerAllocDir)
	}
	if cfg.TaskDir != "" {
		binds = append(binds, filepath.Join(cfg.TaskDir, "local")+":"+containerLocalDir,
			filepath.Join(cfg.TaskDir, "secrets")+":"+containerSecretsDir)
	}
	return binds
}

// containerEnv is the task's env, sorted, with NOMAD_ALLOC_DIR,
// NOMAD_TASK_DIR and NOMAD_SECRETS_DIR moved to the container's paths. The
// host's default PATH, which the client gives every task that sets none,
// is left out so the image's PATH applies; a PATH the job sets is kept.
func containerEnv(cfg *driver.TaskConfig) []string {
	moved := map[string][2]string{
		"NOMAD_TASK_DIR":    {filepath.Join(cfg.TaskDir, "local"), containerLocalDir},
		"NOMAD_SECRETS_DIR": {filepath.Join(cfg.TaskDir, "secrets"), containerSecretsDir},
		"NOMAD_ALLOC_DIR":   {cfg.AllocDir, containerAllocDir},
	}
	env := make([]string, 0, len(cfg.Env))
	for _, k := range slices.Sorted(maps.Keys(cfg.Env)) {
		v := cfg.Env[k]
		if k == "PATH" && v == launch.DefaultPath {
			continue
		}
		if m, ok := moved[k]; ok && m[0] != "" && filepath.Clean(v) == filepath.Clean(m[0]) {
			v = m[1]
		}
		env = append(env, k+"="+v)
	}
	return env
}

// containerResources: cpu shares from the task's cpu (MHz, as Nomad);
// memory the hard limit (memory_max when larger than memory, which then
// becomes the reservation), with no swap.
func containerResources(r *driver.Resources) container.Resources {
	var out container.Resources
	if r == nil {
		return out
	}
	if r.CPUShares > 0 {
		out.CPUShares = max(r.CPUShares, minCPUShares)
	}
	if r.MemoryMB > 0 {
		out.Memory = r.MemoryMB << 20
		if r.MemoryMaxMB > r.MemoryMB {
			out.MemoryReservation = out.Memory
			out.Memory = r.MemoryMaxMB << 20
		}
		out.MemorySwap = out.Memory
	}
	return out
}

// volumeBind turns "src:dst[:opts]" into a bind; a relative src lies in
// the task directory.
func volumeBind(taskDir, v string) (string, error) {
	parts := strings.SplitN(v, ":", 3)
	if len(parts) < 2 || parts[0] == "" || !strings.HasPrefix(parts[1], "/") {
		return "", fmt.Errorf("%w: volume %q must be \"source:/target[:ro]\"", ErrBadConfig, v)
	}
	if !filepath.IsAbs(parts[0]) {
		parts[0] = filepath.Join(taskDir, parts[0])
	}
	return strings.Join(parts, ":"), nil
}

// containerMount turns a mount block into a docker mount.
func containerMount(taskDir string, mt mountConfig) mount.Mount {
	m := mount.Mount{Type: mount.Type(mt.Type), Target: mt.Target, Source: mt.Source, ReadOnly: mt.ReadOnly}
	switch mt.Type {
	case "bind":
		if !filepath.IsAbs(m.Source) {
			m.Source = filepath.Join(taskDir, m.Source)
		}
	case "tmpfs":
		m.Source = ""
		if mt.TmpfsSize > 0 || mt.TmpfsMode != 0 {
			m.TmpfsOptions = &mount.TmpfsOptions{SizeBytes: mt.TmpfsSize}
			if mt.TmpfsMode != 0 {
				m.TmpfsOptions.Mode = os.FileMode(mt.TmpfsMode)
			}
		}
	}
	return m
}

// containerName is "<task>-<alloc-id>-<instance>", unique per task
// instance so a restarted task never collides with its old container.
func containerName(cfg *driver.TaskConfig) string {
	inst := cfg.ID
	if i := strings.LastIndex(inst, "/"); i >= 0 {
		inst = inst[i+1:]
	}
	name := cfg.Name + "-" + cfg.AllocID + "-" + inst
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, name)
}
