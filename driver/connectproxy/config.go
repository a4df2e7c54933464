package connectproxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/meshlet/meshlet/connect"
)

// Sentinel errors. Wrap them with %w; test with errors.Is.
var (
	// ErrInvalidConfig wraps every problem with a task's config block.
	ErrInvalidConfig = errors.New("invalid connect_proxy config")
	// ErrNoNetworkNamespace: the task has no network namespace to run in.
	ErrNoNetworkNamespace = errors.New("connect_proxy tasks run in their allocation's network namespace")
)

// Config keys of a connect_proxy task: exactly the settings of
// `meshlet connect sidecar`.
const (
	keyProxyID       = "proxy_id"
	keyService       = "service"
	keyGRPCAddr      = "grpc_addr"
	keyAdminBind     = "admin_bind"
	keyMode          = "mode"
	keyEnvoyBinary   = "envoy_binary"
	keyBootstrapPath = "bootstrap_path"
	keyTokenFile     = "token_file"
	keyEnvoyArgs     = "envoy_args"
	// keyNetworkMode "host": a gateway in host network mode runs in the
	// host's namespace (not a flag of `meshlet connect sidecar`).
	keyNetworkMode = "network_mode"
)

// keys is every key, sorted (for the unknown-key error).
var keys = []string{keyAdminBind, keyBootstrapPath, keyEnvoyArgs, keyEnvoyBinary, keyGRPCAddr, keyMode, keyNetworkMode, keyProxyID, keyService, keyTokenFile}

// TaskConfig is a connect_proxy task's config block.
type TaskConfig struct {
	// ProxyID is the sidecar proxy's service ID (Envoy node ID). Required.
	ProxyID string
	// Service is the destination service's name. Required.
	Service string
	// GRPCAddr is meshlet's gRPC server, unix:///path. Required.
	GRPCAddr string
	// AdminBind is host:port of the proxy's admin listener.
	AdminBind string
	// Mode is auto, envoy or builtin ("" means auto).
	Mode string
	// EnvoyBinary is the envoy binary found on the node.
	EnvoyBinary string
	// BootstrapPath is the Envoy bootstrap the client wrote.
	BootstrapPath string
	// TokenFile is the sidecar's service identity token the client wrote
	// (secrets/si_token; absent without ACLs).
	TokenFile string
	// EnvoyArgs are appended to Envoy's command line.
	EnvoyArgs []string
	// NetworkMode is "" (the allocation's namespace) or "host" (a gateway
	// in host network mode).
	NetworkMode string
}

// ParseConfig reads a task's config block. An unknown key, a value of the
// wrong type, a missing required key or a bad mode or admin_bind is an
// error wrapping ErrInvalidConfig that names the key, on one line.
func ParseConfig(m map[string]any) (*TaskConfig, error) {
	tc := &TaskConfig{}
	strs := map[string]*string{
		keyProxyID: &tc.ProxyID, keyService: &tc.Service, keyGRPCAddr: &tc.GRPCAddr, keyAdminBind: &tc.AdminBind,
		keyMode: &tc.Mode, keyEnvoyBinary: &tc.EnvoyBinary, keyBootstrapPath: &tc.BootstrapPath, keyTokenFile: &tc.TokenFile,
		keyNetworkMode: &tc.NetworkMode,
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		if dst, ok := strs[k]; ok {
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("%w: %s must be a string, not %s", ErrInvalidConfig, k, describe(v))
			}
			*dst = s
			continue
		}
		if k != keyEnvoyArgs {
			return nil, fmt.Errorf("%w: unknown key %q (the connect_proxy driver takes %s)", ErrInvalidConfig, k, strings.Join(keys, ", "))
		}
		args, err := stringList(v)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, k, err)
		}
		tc.EnvoyArgs = args
	}
	for _, k := range []string{keyProxyID, keyService, keyGRPCAddr} {
		if *strs[k] == "" {
			return nil, fmt.Errorf("%w: %s is required", ErrInvalidConfig, k)
		}
	}
	switch tc.Mode {
	case "", connect.SidecarAuto, connect.SidecarEnvoy, connect.SidecarBuiltin:
	default:
		return nil, fmt.Errorf("%w: mode %q is not auto, envoy or builtin", ErrInvalidConfig, tc.Mode)
	}
	if tc.NetworkMode != "" && tc.NetworkMode != "host" {
		return nil, fmt.Errorf("%w: network_mode %q is not \"host\" (or unset)", ErrInvalidConfig, tc.NetworkMode)
	}
	if tc.AdminBind != "" {
		if _, _, err := net.SplitHostPort(tc.AdminBind); err != nil {
			return nil, fmt.Errorf("%w: admin_bind %q is not host:port", ErrInvalidConfig, tc.AdminBind)
		}
	}
	return tc, nil
}

// Args is the command line after the meshlet binary: `connect sidecar`,
// one flag per set key, then `--` and envoy_args. Every value is its own
// argument after its flag, so no value can be read as a flag.
func (tc *TaskConfig) Args() []string {
	args := []string{"connect", "sidecar", "-proxy-id", tc.ProxyID, "-service", tc.Service, "-grpc-addr", tc.GRPCAddr}
	for _, f := range []struct{ flag, value string }{
		{"-admin-bind", tc.AdminBind}, {"-mode", tc.Mode}, {"-envoy-binary", tc.EnvoyBinary}, {"-bootstrap-path", tc.BootstrapPath},
		{"-token-file", tc.TokenFile},
	} {
		if f.value != "" {
			args = append(args, f.flag, f.value)
		}
	}
	if len(tc.EnvoyArgs) > 0 {
		args = append(append(args, "--"), tc.EnvoyArgs...)
	}
	return args
}

// stringList reads a list of strings; numbers and booleans become their
// text (HCL and JSON give numbers for envoy_args = ["--concurrency", 2]).
func stringList(v any) ([]string, error) {
	switch l := v.(type) {
	case []string:
		return slices.Clone(l), nil
	case []any:
		out := make([]string, 0, len(l))
		for i, e := range l {
			switch x := e.(type) {
			case string:
				out = append(out, x)
			case float64:
				out = append(out, strconv.FormatFloat(x, 'f', -1, 64))
			case int:
				out = append(out, strconv.Itoa(x))
			case int64:
				out = append(out, strconv.FormatInt(x, 10))
			case json.Number:
				out = append(out, x.String())
			case bool:
				out = append(out, strconv.FormatBool(x))
			default:
				return nil, fmt.Errorf("element %d must be a string, not %s", i, describe(e))
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("must be a list of strings, not %s", describe(v))
}

// describe names a config value's type as a jobspec author sees it.
func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a bool"
	case float64, float32, int, int64, json.Number:
		return "a number"
	case []any, []string:
		return "a list"
	case map[string]any:
		return "a map"
	}
	return fmt.Sprintf("a %T", v)
}
