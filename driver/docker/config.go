package docker

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/internal/isolate"
)

// Sentinel errors of task configuration; test with errors.Is.
var (
	// ErrBadConfig wraps every invalid task config.
	ErrBadConfig = errors.New("invalid docker task config")
	// ErrNotAllowed wraps a task config the client's plugin config forbids
	// (privileged without allow_privileged, host volumes without volumes
	// { enabled = true }, a capability outside allow_caps).
	ErrNotAllowed = errors.New("not allowed by the client's docker plugin config")
)

// Network modes a task's network_mode may name.
const (
	NetworkModeNone = "none"
	NetworkModeHost = "host"
)

// defaultPullTimeout is Nomad's image_pull_timeout.
const defaultPullTimeout = 5 * time.Minute

// TaskKeys are the task config keys the driver reads (Nomad's names);
// any other key is an error.
var TaskKeys = slices.Sorted(slices.Values(append([]string{
	"args", "auth", "cap_add", "cap_drop", "command", "entrypoint", "force_pull",
	"image", "image_pull_timeout", "labels", "logging", "mount", "network_mode",
	"ports", "privileged", "volumes", "work_dir",
}, optionKeys...)))

// taskConfig is a task's docker config.
type taskConfig struct {
	Image       string
	Command     string
	Args        []string
	Entrypoint  []string
	WorkDir     string
	Labels      map[string]string
	Ports       []string
	Volumes     []string
	Mounts      []mountConfig
	Privileged  bool
	CapAdd      []string
	CapDrop     []string
	NetworkMode string
	ForcePull   bool
	PullTimeout time.Duration
	LogType     string
	LogConfig   map[string]string
	// Auth is the registry login for pulls (nil: anonymous).
	Auth *authConfig
	// Options are the rest of Nomad's options (options.go).
	Options options
}

// authConfig is the auth block.
type authConfig struct {
	Username, Password, Email, ServerAddress string
}

// mountConfig is one mount block: type "bind" (a host path, only with
// volumes enabled), "volume" (a docker volume) or "tmpfs".
type mountConfig struct {
	Type     string
	Target   string
	Source   string
	ReadOnly bool
	// TmpfsSize is tmpfs_options { size } in bytes; TmpfsMode its mode.
	TmpfsSize int64
	TmpfsMode uint32
}

// parseTaskConfig reads and checks a task's config map (as the jobspec
// parser produces it: blocks are lists of maps, numbers float64 or int).
func parseTaskConfig(m map[string]any) (*taskConfig, error) {
	var unknown []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(TaskKeys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("%w: unknown key(s) %s; the docker driver takes %s", ErrBadConfig,
			strings.Join(unknown, ", "), strings.Join(TaskKeys, ", "))
	}
	r := reader{m: m}
	tc := &taskConfig{
		Image:       r.str("image"),
		Command:     r.str("command"),
		Args:        r.strs("args", true),
		Entrypoint:  r.strs("entrypoint", false),
		WorkDir:     r.str("work_dir"),
		Labels:      r.strMap(m["labels"], "labels"),
		Ports:       r.strs("ports", false),
		Volumes:     r.strs("volumes", false),
		Privileged:  r.boolean("privileged"),
		CapAdd:      r.strs("cap_add", false),
		CapDrop:     r.strs("cap_drop", false),
		NetworkMode: r.str("network_mode"),
		ForcePull:   r.boolean("force_pull"),
		PullTimeout: defaultPullTimeout,
	}
	if s := r.str("image_pull_timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			r.fail("image_pull_timeout must be a positive duration such as \"5m\", got %q", s)
		}
		tc.PullTimeout = d
	}
	if a := r.block("auth", []string{"username", "password", "email", "server_address"}); a != nil {
		sub := reader{m: a}
		tc.Auth = &authConfig{Username: sub.str("username"), Password: sub.str("password"),
			Email: sub.str("email"), ServerAddress: sub.str("server_address")}
		r.errs = append(r.errs, sub.errs...)
	}
	if lg := r.block("logging", []string{"type", "driver", "config"}); lg != nil {
		sub := reader{m: lg}
		tc.LogType = sub.str("type")
		if d := sub.str("driver"); tc.LogType == "" {
			tc.LogType = d
		}
		tc.LogConfig = sub.strMap(subBlock(lg["config"]), "logging.config")
		r.errs = append(r.errs, sub.errs...)
	}
	tc.Mounts = r.mounts()
	tc.Options = r.readOptions()
	if tc.Image == "" {
		r.fail("image is required")
	}
	switch tc.NetworkMode {
	case "", NetworkModeNone, NetworkModeHost:
	default:
		r.fail("network_mode %q is not supported: use \"none\" or \"host\" (or leave it unset)", tc.NetworkMode)
	}
	if tc.LogType != "" && tc.LogType != "json-file" {
		r.fail("logging type %q is not supported: the driver reads the container's output for alloc logs, so it must be json-file", tc.LogType)
	}
	if err := errors.Join(r.errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	return tc, nil
}

// configError marks a task config error unrecoverable (see
// driver.ErrUnrecoverable): an invalid config, one the plugin config
// forbids, or a namespace this node's docker tasks cannot join stay so
// however often the task starts. Other errors (a pull, the daemon) are
// returned as they are.
func configError(err error) error {
	if errors.Is(err, ErrBadConfig) || errors.Is(err, ErrNotAllowed) || errors.Is(err, ErrNetNSUnsupported) {
		return driver.Unrecoverable(err)
	}
	return err
}

// checkAllowed checks tc against the plugin config and returns the
// container's capabilities: Nomad's defaults within allow_caps, minus
// cap_drop, plus cap_add (which must lie within allow_caps).
func (c *Config) checkAllowed(tc *taskConfig) ([]string, error) {
	if tc.Privileged && !c.AllowPrivileged {
		return nil, fmt.Errorf("privileged containers are %w: set allow_privileged = true", ErrNotAllowed)
	}
	if !c.VolumesEnabled {
		for _, v := range tc.Volumes {
			if src, _, _ := strings.Cut(v, ":"); !inTaskDir(src) {
				return nil, fmt.Errorf("volume %q: host paths outside the task directory are %w: set volumes { enabled = true }", v, ErrNotAllowed)
			}
		}
		for _, mt := range tc.Mounts {
			if mt.Type == "volume" || mt.Type == "bind" && !inTaskDir(mt.Source) {
				return nil, fmt.Errorf("%s mount of %q is %w: set volumes { enabled = true }", mt.Type, mt.Source, ErrNotAllowed)
			}
		}
	}
	allow := c.AllowCaps
	if allow == nil {
		allow = DefaultCaps()
	}
	bounding, _, err := isolate.TaskCaps(allow, tc.CapAdd, tc.CapDrop)
	if err != nil {
		if errors.Is(err, isolate.ErrCapNotAllowed) {
			return nil, fmt.Errorf("cap_add: %w (%w)", err, ErrNotAllowed)
		}
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	caps := make([]string, 0, len(bounding.Names()))
	for _, n := range bounding.Names() {
		caps = append(caps, "CAP_"+strings.ToUpper(n))
	}
	return caps, nil
}

// inTaskDir: a relative path that stays inside the task directory.
func inTaskDir(src string) bool {
	if filepath.IsAbs(src) {
		return false
	}
	c := filepath.Clean(src)
	return c != ".." && !strings.HasPrefix(c, "../")
}

// DefaultCaps is Nomad's docker allow_caps default (Docker's own default
// set without net_raw), lower case without "cap_".
func DefaultCaps() []string { return isolate.DefaultCaps() }

// CheckCaps accepts capability names as Nomad does (case-insensitive, with
// or without "CAP_", "all").
func CheckCaps(names []string) error {
	_, err := isolate.ParseCaps(names)
	return err
}

// mounts reads the mount blocks.
func (r *reader) mounts() []mountConfig {
	var out []mountConfig
	for i, b := range blockList(r.m["mount"]) {
		name := fmt.Sprintf("mount[%d]", i)
		if err := onlyKeys(b, name, "type", "target", "source", "readonly", "tmpfs_options", "bind_options", "volume_options"); err != nil {
			r.errs = append(r.errs, err)
			continue
		}
		sub := reader{m: b}
		mt := mountConfig{Type: sub.str("type"), Target: sub.str("target"), Source: sub.str("source"), ReadOnly: sub.boolean("readonly")}
		if mt.Type == "" {
			mt.Type = "volume" // Nomad's default
		}
		switch mt.Type {
		case "bind", "volume":
			if mt.Source == "" {
				sub.fail("%s: source is required for a %s mount", name, mt.Type)
			}
		case "tmpfs":
			if to := subBlock(b["tmpfs_options"]); to != nil {
				ts := reader{m: to}
				mt.TmpfsSize = ts.integer("size")
				mt.TmpfsMode = uint32(ts.integer("mode"))
				sub.errs = append(sub.errs, ts.errs...)
			}
		default:
			sub.fail("%s: type must be bind, volume or tmpfs, got %q", name, mt.Type)
		}
		if !strings.HasPrefix(mt.Target, "/") {
			sub.fail("%s: target must be an absolute path, got %q", name, mt.Target)
		}
		r.errs = append(r.errs, sub.errs...)
		out = append(out, mt)
	}
	return out
}
