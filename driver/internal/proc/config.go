package proc

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Namespace modes of an isolated task's pid_mode and ipc_mode (Nomad's).
const (
	ModePrivate = "private"
	ModeHost    = "host"
)

// ErrBadMode is returned for a pid or IPC mode other than ModePrivate
// and ModeHost.
var ErrBadMode = errors.New(`must be "private" or "host"`)

// CheckMode accepts "", ModePrivate and ModeHost.
func CheckMode(mode string) error {
	switch mode {
	case "", ModePrivate, ModeHost:
		return nil
	}
	return fmt.Errorf("%w, got %q", ErrBadMode, mode)
}

// taskConfig is the driver config block: command and args, and for an
// isolated task cap_add, cap_drop, pid_mode and ipc_mode. Other keys
// (work_dir, ...) are ignored.
type taskConfig struct {
	Command string
	Args    []string
	CapAdd  []string
	CapDrop []string
	PIDMode string
	IPCMode string
	// Env replaces the task's env when not nil (Options.Launch).
	Env map[string]string
}

// parseTaskConfig reads command (required string) and args (a list whose
// elements may be strings, numbers or booleans); with isolated also
// cap_add and cap_drop (lists of strings) and pid_mode and ipc_mode
// ("private" or "host"), which raw_exec, like Nomad's, ignores.
func parseTaskConfig(m map[string]any, isolated bool) (*taskConfig, error) {
	raw, ok := m["command"]
	if !ok || raw == nil {
		return nil, errors.New("config: command is required")
	}
	cmd, ok := raw.(string)
	if !ok || cmd == "" {
		return nil, fmt.Errorf("config: command must be a non-empty string, got %T", raw)
	}
	tc := &taskConfig{Command: cmd}
	switch args := m["args"].(type) {
	case nil:
	case []string:
		tc.Args = append(tc.Args, args...)
	case []any:
		for i, a := range args {
			s, err := stringify(a)
			if err != nil {
				return nil, fmt.Errorf("config: args[%d]: %w", i, err)
			}
			tc.Args = append(tc.Args, s)
		}
	default:
		return nil, fmt.Errorf("config: args must be a list, got %T", args)
	}
	if !isolated {
		return tc, nil
	}
	var err error
	if tc.CapAdd, err = stringList(m, "cap_add"); err != nil {
		return nil, err
	}
	if tc.CapDrop, err = stringList(m, "cap_drop"); err != nil {
		return nil, err
	}
	if tc.PIDMode, err = mode(m, "pid_mode"); err != nil {
		return nil, err
	}
	if tc.IPCMode, err = mode(m, "ipc_mode"); err != nil {
		return nil, err
	}
	return tc, nil
}

// stringList reads an optional list of strings.
func stringList(m map[string]any, key string) ([]string, error) {
	switch v := m[key].(type) {
	case nil:
		return nil, nil
	case []string:
		return append([]string(nil), v...), nil
	case []any:
		out := make([]string, 0, len(v))
		for i, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("config: %s[%d] must be a string, got %T", key, i, e)
			}
			out = append(out, s)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("config: %s must be a list of strings, got %T", key, v)
	}
}

// mode reads an optional pid_mode or ipc_mode.
func mode(m map[string]any, key string) (string, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("config: %s must be a string, got %T", key, v)
	}
	if err := CheckMode(s); err != nil {
		return "", fmt.Errorf("config: %s %w", key, err)
	}
	return s, nil
}

func stringify(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32), nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	}
	return "", fmt.Errorf("must be a string or number, got %T", v)
}
