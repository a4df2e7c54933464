package connectproxy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/meshlet/meshlet/connect"
)

// Sidecar runtimes: how the node runs a connect_proxy task (the plugin
// "connect_proxy" { config { runtimes } } order).
const (
	// RuntimeDocker runs the sidecar as Nomad's Envoy container through the
	// node's docker driver, joined to the allocation's network namespace.
	RuntimeDocker = "docker"
	// RuntimeEnvoy runs the node's envoy binary (`meshlet connect sidecar
	// -mode envoy`).
	RuntimeEnvoy = "envoy"
	// RuntimeBuiltin runs meshlet's built-in proxy.
	RuntimeBuiltin = "builtin"
)

// DefaultRuntimes is the order a node tries when none is configured: the
// Envoy container where the docker driver is healthy and the image is
// present, else the host's Envoy, else the built-in proxy.
var DefaultRuntimes = []string{RuntimeDocker, RuntimeEnvoy, RuntimeBuiltin}

// Sentinel errors of the runtime choice.
var (
	// ErrInvalidRuntimes: the runtimes option is not a list of distinct
	// known runtime names.
	ErrInvalidRuntimes = errors.New("invalid connect_proxy runtimes")
	// ErrNoRuntime: no runtime of the order can run the sidecar here.
	ErrNoRuntime = errors.New("no sidecar runtime available on this node")
)

// ValidateRuntimes checks a runtimes option: a non-empty list of distinct
// names among docker, envoy and builtin.
func ValidateRuntimes(order []string) error {
	if len(order) == 0 {
		return fmt.Errorf("%w: the list is empty (want some of %s)", ErrInvalidRuntimes, strings.Join(DefaultRuntimes, ", "))
	}
	for i, r := range order {
		if !slices.Contains(DefaultRuntimes, r) {
			return fmt.Errorf("%w: unknown runtime %q (want %s)", ErrInvalidRuntimes, r, strings.Join(DefaultRuntimes, ", "))
		}
		if slices.Contains(order[:i], r) {
			return fmt.Errorf("%w: runtime %q is listed twice", ErrInvalidRuntimes, r)
		}
	}
	return nil
}

// taskOrder is the runtimes a task may use: a task whose mode forces envoy
// or builtin (the agent's sidecar setting, or the job's sidecar_task) gets
// that one; auto gets the node's order.
func taskOrder(mode string, order []string) []string {
	switch mode {
	case connect.SidecarEnvoy:
		return []string{RuntimeEnvoy}
	case connect.SidecarBuiltin:
		return []string{RuntimeBuiltin}
	}
	return order
}

// candidates are the runtimes of order that probe finds usable, in order,
// and "<runtime>: <reason>" for each one it does not.
func candidates(order []string, probe func(runtime string) error) (usable, skipped []string) {
	for _, r := range order {
		if err := probe(r); err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", r, err))
			continue
		}
		usable = append(usable, r)
	}
	return usable, skipped
}

// noRuntimeError explains why no runtime could run a task.
func noRuntimeError(order, skipped []string) error {
	return fmt.Errorf("%w (tried %s: %s)", ErrNoRuntime, strings.Join(order, ", "), strings.Join(skipped, "; "))
}

// firstRuntime starts a task on the first runtime of order that can run
// it: a runtime probe refuses is skipped, with its reason; start runs it on
// one probe accepts; a start error for which pass is true (the docker
// runtime's failed pull) skips that runtime too, any other is returned. It
// returns the runtime started ("" when none could be), start's result and
// the reasons, "<runtime>: <reason>", in order.
func firstRuntime[T any](order []string, probe func(string) error, start func(string) (T, error),
	pass func(string, error) bool) (string, T, []string, error) {
	var zero T
	var skipped []string
	for _, r := range order {
		if err := probe(r); err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", r, err))
			continue
		}
		v, err := start(r)
		if err != nil && pass(r, err) {
			skipped = append(skipped, fmt.Sprintf("%s: %v", r, err))
			continue
		}
		if err != nil {
			return "", zero, skipped, err
		}
		return r, v, skipped, nil
	}
	return "", zero, skipped, nil
}
