package jobspecs

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/meshlet/meshlet/internal/lazyre"
	"github.com/meshlet/meshlet/structs"
)

// MaxNameBytes bounds job IDs and names, group, task, service and port
// names (meshlet's limit: IDs become database keys, file names and
// environment values).
const MaxNameBytes = 128

// cniNameRE is the CNI specification's network name.
var cniNameRE = lazyre.New(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// unsafeRune reports characters that must never appear in a name: C0 and
// C1 controls, DEL, and the bidirectional formatting characters that make
// a terminal print text other than what is stored (U+061C, U+200E, U+200F,
// U+202A-U+202E, U+2066-U+2069).
func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// checkName rejects an over-long name, invalid UTF-8 and unsafe
// characters. kind is "Job ID", "Group name"...; an empty name is left to
// the caller's own rule.
func checkName(kind, name string, p path, report reporter) bool {
	return checkNameLen(kind, name, MaxNameBytes, p, report)
}

// checkNameLen is checkName with another length limit; 0 means none
// (service names default to "<job>-<group>-<task>", longer than any one
// name, and are bounded by the job's size).
func checkNameLen(kind, name string, maxLen int, p path, report reporter) bool {
	if maxLen > 0 && len(name) > maxLen {
		report(SeverityError, p, "Invalid "+strings.ToLower(kind), fmt.Sprintf("%s is %d bytes long; the limit is %d bytes.", kind, len(name), maxLen))
		return false
	}
	if !utf8.ValidString(name) {
		report(SeverityError, p, "Invalid "+strings.ToLower(kind), fmt.Sprintf("%s %q is not valid UTF-8.", kind, name))
		return false
	}
	if i := strings.IndexFunc(name, unsafeRune); i >= 0 {
		r, _ := utf8.DecodeRuneInString(name[i:])
		report(SeverityError, p, "Invalid "+strings.ToLower(kind), fmt.Sprintf(
			"%s %q contains the control or bidirectional formatting character %U; names may not contain them.", kind, name, r))
		return false
	}
	return true
}

// checkTaskName: a task's name is also the name of its directory in the
// allocation directory.
func checkTaskName(name string, p path, report reporter) {
	if !checkName("Task name", name, p, report) {
		return
	}
	if strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		report(SeverityError, p, "Invalid task name", fmt.Sprintf(
			"Task name %q names a directory in the allocation: it may not contain '/' or '\\' or be \".\" or \"..\".", name))
	}
}

// checkCNIName applies the CNI specification's rule to a cni/<name> mode.
func checkCNIName(mode string, p path, report reporter) {
	name, ok := strings.CutPrefix(mode, structs.NetworkModeCNIPrefix)
	if !ok || name == "" {
		return
	}
	if len(name) > MaxNameBytes || !cniNameRE.MatchString(name) {
		report(SeverityError, p, "Invalid CNI network name", fmt.Sprintf(
			"Network mode %q: a CNI network name has letters, digits, '_', '.' and '-' only, starts with a letter or digit and is at most %d bytes.",
			mode, MaxNameBytes))
	}
}

// Driver config keys of Nomad's exec and raw_exec drivers. Both of
// meshlet's drivers read command and args, exec also the capability lists
// and namespace modes; the rest are accepted with a warning.
var (
	driverConfigUsed = map[string][]string{
		"raw_exec": {"command", "args"},
		"exec":     {"command", "args", "cap_add", "cap_drop", "pid_mode", "ipc_mode"},
	}
	driverConfigIgnored = map[string][]string{
		"raw_exec": {"cgroup_v1_override", "cgroup_v2_override", "oom_score_adj", "work_dir", "denied_envvars"},
		"exec":     {"work_dir", "denied_envvars", "oom_score_adj"},
	}
)

// checkDriverConfig validates the config of the built-in drivers the way
// they read it when the task starts: command a non-empty string, args a
// list of strings, numbers or booleans (docker's: checkDockerConfig). Keys they do not read are warned
// about (they were always ignored). Other drivers' schemas are not known
// at submit time.
func checkDriverConfig(t *structs.Task, p path, report reporter) {
	if t.Driver == "docker" {
		checkDockerConfig(t, p.attr("config"), report)
		return
	}
	ignored, known := driverConfigIgnored[t.Driver]
	if !known {
		return
	}
	cp := p.attr("config")
	switch cmd := t.Config["command"].(type) {
	case string:
		if cmd == "" {
			report(SeverityError, cp, "Invalid driver config", fmt.Sprintf("Task %q: config command must not be empty.", t.Name))
		}
	case nil:
		report(SeverityError, cp, "Missing driver config command",
			fmt.Sprintf("Task %q: the %s driver needs config { command = \"...\" }.", t.Name, t.Driver))
	default:
		report(SeverityError, cp, "Invalid driver config", fmt.Sprintf("Task %q: config command must be a string, not %s.", t.Name, goType(cmd)))
	}
	checkArgs(t, cp, report)
	if t.Driver == "exec" {
		checkExecConfig(t, cp, report)
	}
	used := driverConfigUsed[t.Driver]
	for _, k := range slices.Sorted(maps.Keys(t.Config)) {
		switch {
		case slices.Contains(used, k):
		case slices.Contains(ignored, k):
			report(SeverityWarning, cp, fmt.Sprintf("config %s is not supported by meshlet's %s driver; ignored", k, t.Driver), "")
		default:
			report(SeverityWarning, cp, fmt.Sprintf("Unknown %s config key %q; ignored", t.Driver, k), fmt.Sprintf(
				"The %s driver takes %s.%s", t.Driver, andList(used), suggest(k, used, ignored)))
		}
	}
}

// andList joins names as prose: "a and b", "a, b and c".
func andList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// checkExecConfig checks the exec driver's capability lists (lists of
// strings) and namespace modes ("private" or "host") as the driver reads
// them; whether a capability is allowed is the client's allow_caps, known
// only where the task runs.
func checkExecConfig(t *structs.Task, cp path, report reporter) {
	for _, k := range []string{"cap_add", "cap_drop"} {
		switch v := t.Config[k].(type) {
		case nil, []string:
		case []any:
			for i, c := range v {
				if _, ok := c.(string); !ok {
					report(SeverityError, cp, "Invalid driver config", fmt.Sprintf(
						"Task %q: config %s[%d] must be a string, not %s.", t.Name, k, i, goType(c)))
				}
			}
		default:
			report(SeverityError, cp, "Invalid driver config", fmt.Sprintf("Task %q: config %s must be a list of strings, not %s.", t.Name, k, goType(v)))
		}
	}
	for _, k := range []string{"pid_mode", "ipc_mode"} {
		v, ok := t.Config[k]
		if !ok {
			continue
		}
		if s, isStr := v.(string); !isStr || (s != "" && s != "private" && s != "host") {
			report(SeverityError, cp, "Invalid driver config", fmt.Sprintf(
				"Task %q: config %s must be \"private\" or \"host\", not %#v.", t.Name, k, v))
		}
	}
}

func checkArgs(t *structs.Task, cp path, report reporter) {
	switch args := t.Config["args"].(type) {
	case nil, []string:
	case []any:
		for i, a := range args {
			switch a.(type) {
			case string, bool, int, int64, float64, json.Number:
			default:
				report(SeverityError, cp, "Invalid driver config", fmt.Sprintf(
					"Task %q: config args[%d] must be a string, number or bool, not %s.", t.Name, i, goType(a)))
			}
		}
	default:
		report(SeverityError, cp, "Invalid driver config", fmt.Sprintf("Task %q: config args must be a list, not %s.", t.Name, goType(args)))
	}
}

// goType names a decoded config value's type the way a user wrote it.
func goType(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a map"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a bool"
	case nil:
		return "null"
	}
	return "a number"
}
