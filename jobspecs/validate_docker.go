package jobspecs

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"

	"github.com/meshlet/meshlet/structs"
)

// dockerConfigKeys are the docker task config keys meshlet's driver reads
// (driver/docker.TaskKeys; a test keeps the two equal). The driver refuses
// any other key when the task starts, so they are errors here.
var dockerConfigKeys = []string{
	"args", "auth", "cap_add", "cap_drop", "command", "cpuset_cpus", "devices", "dns_options", "dns_search_domains",
	"dns_servers", "entrypoint", "extra_hosts", "force_pull", "healthchecks", "hostname", "image",
	"image_pull_timeout", "init", "interactive", "ipc_mode", "labels", "logging", "mount", "network_mode",
	"pid_mode", "pids_limit", "ports", "privileged", "readonly_rootfs", "runtime", "security_opt", "shm_size",
	"sysctl", "tty", "ulimit", "userns_mode", "uts_mode", "volumes", "work_dir",
}

// dockerConfigUnsupported are Nomad docker keys meshlet's driver does not
// implement (yet): named as such rather than as unknown.
var dockerConfigUnsupported = []string{
	"cpu_cfs_period", "cpu_hard_limit", "group_add", "ipv4_address",
	"ipv6_address", "isolation", "load", "mac_address", "memory_hard_limit", "network_aliases",
	"oom_score_adj", "storage_opt",
}

// checkDockerConfig checks a docker task's config as the driver reads it:
// image a non-empty string, known keys only, network_mode "none" or
// "host", lists of strings where the driver wants them.
func checkDockerConfig(t *structs.Task, cp path, report reporter) {
	bad := func(detail string, args ...any) {
		report(SeverityError, cp, "Invalid driver config", fmt.Sprintf("Task %q: ", t.Name)+fmt.Sprintf(detail, args...))
	}
	switch img := t.Config["image"].(type) {
	case string:
		if img == "" {
			bad("config image must not be empty.")
		}
	case nil:
		report(SeverityError, cp, "Missing driver config image",
			fmt.Sprintf("Task %q: the docker driver needs config { image = \"...\" }.", t.Name))
	default:
		bad("config image must be a string, not %s.", goType(img))
	}
	for _, k := range []string{"command", "work_dir", "network_mode", "image_pull_timeout", "hostname", "ipc_mode", "pid_mode", "runtime", "uts_mode", "userns_mode", "cpuset_cpus"} {
		if v, ok := t.Config[k]; ok && v != nil {
			if _, isStr := v.(string); !isStr {
				bad("config %s must be a string, not %s.", k, goType(v))
			}
		}
	}
	switch m, _ := t.Config["network_mode"].(string); m {
	case "", "none", "host":
	default:
		bad("config network_mode %q is not supported by meshlet's docker driver; use \"none\" or \"host\", or leave it unset.", m)
	}
	for _, k := range []string{"privileged", "force_pull", "readonly_rootfs", "tty", "interactive", "init"} {
		if v, ok := t.Config[k]; ok && v != nil {
			if _, isBool := v.(bool); !isBool {
				bad("config %s must be a bool, not %s.", k, goType(v))
			}
		}
	}
	checkStringLists(t, cp, []string{"entrypoint", "cap_add", "cap_drop", "ports", "volumes",
		"dns_servers", "dns_search_domains", "dns_options", "extra_hosts", "security_opt"}, bad)
	checkDockerAddrs(t, cp, report, bad)
	checkDockerModes(t, cp, report, bad)
	for _, k := range slices.Sorted(maps.Keys(t.Config)) {
		switch {
		case slices.Contains(dockerConfigKeys, k):
		case slices.Contains(dockerConfigUnsupported, k):
			report(SeverityError, cp, fmt.Sprintf("config %s is not supported by meshlet's docker driver", k),
				fmt.Sprintf("Task %q: remove it; the driver refuses keys it does not implement.", t.Name))
		default:
			report(SeverityError, cp, fmt.Sprintf("Unknown docker config key %q", k), fmt.Sprintf(
				"The docker driver takes %s.%s", andList(dockerConfigKeys), suggest(k, dockerConfigKeys, dockerConfigUnsupported)))
		}
	}
}

// checkStringLists requires each key, when set, to be a list of strings.
func checkStringLists(t *structs.Task, cp path, keys []string, bad func(string, ...any)) {
	for _, k := range keys {
		switch v := t.Config[k].(type) {
		case nil, []string:
		case []any:
			for i, e := range v {
				if _, ok := e.(string); !ok {
					bad("config %s[%d] must be a string, not %s.", k, i, goType(e))
				}
			}
		default:
			bad("config %s must be a list of strings, not %s.", k, goType(v))
		}
	}
}

// checkDockerGroup refuses a docker task hostname where the task joins the
// group's bridge or cni/* namespace (network_mode unset): Docker refuses a
// hostname for a container using another's network, and the driver says
// so when the task starts.
func checkDockerGroup(tg *structs.TaskGroup, p path, report reporter) {
	if len(tg.Networks) == 0 || tg.Networks[0] == nil {
		return
	}
	mode := tg.Networks[0].Mode
	if mode != structs.NetworkModeBridge && !strings.HasPrefix(mode, structs.NetworkModeCNIPrefix) {
		return
	}
	for i, t := range tg.Tasks {
		if t == nil || t.Driver != "docker" || t.Config["hostname"] == nil || t.Config["network_mode"] != nil {
			continue
		}
		report(SeverityError, p.item("task", i, t.Name).attr("config"), "Invalid driver config",
			fmt.Sprintf("Task %q: config hostname cannot be set on a docker task in a %q group, whose network namespace it joins; set the group's network { hostname } instead.", t.Name, mode))
	}
}

// checkDockerAddrs checks the literal (not interpolated) dns_servers and
// extra_hosts as the driver does: an extra_hosts entry must be
// "name:IP" (an error); a dns_servers entry that is not an IP address is
// dropped by the driver with a log line, as Nomad does, so it is a
// warning here.
func checkDockerAddrs(t *structs.Task, cp path, report reporter, bad func(string, ...any)) {
	for _, k := range []string{"dns_servers", "extra_hosts"} {
		list, _ := t.Config[k].([]any)
		for _, e := range list {
			s, ok := e.(string)
			if !ok || strings.Contains(s, "${") {
				continue
			}
			if k == "dns_servers" {
				if net.ParseIP(s) == nil {
					report(SeverityWarning, cp, "Invalid dns server", fmt.Sprintf(
						"Task %q: config dns_servers: %q is not an IP address; the driver drops it (as Nomad does).", t.Name, s))
				}
				continue
			}
			name, ip, _ := strings.Cut(s, ":")
			if name == "" || net.ParseIP(ip) == nil {
				bad("config %s: %q must be \"hostname:IP\".", k, s)
			}
		}
	}
}

// checkDockerModes checks uts_mode and userns_mode ("host" or unset) and
// a literal pids_limit (a whole number, not negative), as the driver
// does; cpuset_cpus is accepted and ignored, as in Nomad, so it warns.
func checkDockerModes(t *structs.Task, cp path, report reporter, bad func(string, ...any)) {
	for _, k := range []string{"uts_mode", "userns_mode"} {
		if v, ok := t.Config[k].(string); ok && v != "" && v != "host" && !strings.Contains(v, "${") {
			bad("config %s must be \"host\" or unset, not %q.", k, v)
		}
	}
	var n float64
	switch v := t.Config["pids_limit"].(type) {
	case nil, string:
	case int:
		n = float64(v)
	case int64:
		n = float64(v)
	case float64:
		n = v
	default:
		bad("config pids_limit must be a number, not %s.", goType(v))
	}
	if n < 0 || n != float64(int64(n)) {
		bad("config pids_limit must be a whole number, not negative, got %v.", n)
	}
	if _, ok := t.Config["cpuset_cpus"]; ok {
		report(SeverityWarning, cp, "Ignored docker config cpuset_cpus", fmt.Sprintf(
			"Task %q: cpuset_cpus is not supported (as in Nomad, which ignores it since 0.12); the driver ignores it.", t.Name))
	}
}
