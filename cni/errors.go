package cni

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Errors returned by this package wrap one of them when
// the cause is known; test with errors.Is.
var (
	// ErrInvalidConfig: a Config field is malformed.
	ErrInvalidConfig = errors.New("invalid CNI configuration")
	// ErrInvalidAllocation: the allocation cannot be networked as given
	// (no ID, bad port mapping...).
	ErrInvalidAllocation = errors.New("invalid allocation")
	// ErrUnsupportedMode: network.mode is not host, none, bridge or cni/<name>.
	ErrUnsupportedMode = errors.New("unsupported network mode")
	// ErrNetworkNotFound: mode cni/<name> names no conflist in ConfigDir.
	ErrNetworkNotFound = errors.New("CNI network not found")
	// ErrPluginMissing: a CNI plugin binary is not in PluginDir.
	ErrPluginMissing = errors.New("CNI plugin missing")
	// ErrIptablesMissing: the iptables binary is not in $PATH.
	ErrIptablesMissing = errors.New("iptables missing")
	// ErrSubnetExhausted: host-local has no free address left.
	ErrSubnetExhausted = errors.New("subnet exhausted")
	// ErrPermission: the caller lacks the privileges namespaces need.
	ErrPermission = errors.New("permission denied")
	// ErrPluginFailed: a CNI plugin failed for another reason.
	ErrPluginFailed = errors.New("CNI plugin failed")
	// ErrNamespaceLost: Restore found the allocation's namespace gone and
	// set its network up in a new one. It comes with the new network's
	// status; tasks started in the old namespace have no network and must
	// be restarted into the new one.
	ErrNamespaceLost = errors.New("allocation network namespace lost; its tasks must be restarted")
)

// fixError is an error whose message tells the operator what to fix. It
// unwraps to its sentinel and, if any, to the underlying cause.
type fixError struct {
	sentinel error
	msg      string
	cause    error
}

func newError(sentinel error, msg string, cause error) error {
	return &fixError{sentinel: sentinel, msg: msg, cause: cause}
}

func (e *fixError) Error() string {
	if e.cause == nil {
		return e.msg
	}
	return e.msg + ": " + oneLine(e.cause.Error())
}

func (e *fixError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.sentinel}
	}
	return []error{e.sentinel, e.cause}
}

// oneLine collapses a multi-line plugin message so errors stay one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// pluginMissingError is the actionable error for an absent plugin binary.
func pluginMissingError(name, dir string) error {
	return newError(ErrPluginMissing,
		fmt.Sprintf("CNI plugin %q not found in %s; run `make cni` or set cni_path", name, dir), nil)
}

// iptablesMissingError is the actionable error for an absent iptables.
func iptablesMissingError(cause error) error {
	return newError(ErrIptablesMissing,
		"iptables not found in $PATH (the bridge network's masquerade, firewall and port mappings need it); install iptables", cause)
}

// classify turns an error from a CNI plugin (as returned by libcni) into
// an actionable error wrapping a sentinel. Plugins run as separate
// processes, so the only signal they give is their message text; this is
// the one place that reads it. network and subnet only decorate messages.
func classify(err error, network, subnet string) error {
	if err == nil {
		return nil
	}
	var fe *fixError
	if errors.As(err, &fe) {
		return err
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "no IP addresses available"):
		return newError(ErrSubnetExhausted, fmt.Sprintf(
			"CNI network %q has no free address in subnet %s; stop unused allocations or configure a larger subnet", network, subnet), err)
	case strings.Contains(msg, "failed to find plugin"):
		return newError(ErrPluginMissing, "a CNI plugin binary is missing; run `make cni` or set cni_path", err)
	case strings.Contains(msg, "iptables") && (strings.Contains(msg, "executable file not found") || strings.Contains(msg, "failed to locate")):
		return iptablesMissingError(err)
	case strings.Contains(msg, "operation not permitted") || strings.Contains(msg, "permission denied"):
		return newError(ErrPermission, "network namespaces and CNI need root (CAP_SYS_ADMIN, CAP_NET_ADMIN); run meshlet as root", err)
	}
	return newError(ErrPluginFailed, fmt.Sprintf("CNI network %q failed", network), err)
}

// permanent reports whether retrying cannot help.
func permanent(err error) bool {
	for _, s := range []error{ErrSubnetExhausted, ErrPluginMissing, ErrIptablesMissing, ErrPermission, ErrInvalidAllocation} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
