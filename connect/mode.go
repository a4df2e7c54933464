package connect

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Sidecar modes (agent config `sidecar`).
const (
	SidecarAuto    = "auto"
	SidecarEnvoy   = "envoy"
	SidecarBuiltin = "builtin"
)

// ErrNoEnvoy is returned when mode "envoy" is asked for on a node without
// an envoy binary.
var ErrNoEnvoy = errors.New("sidecar mode \"envoy\" needs an envoy binary on the node")

// ResolveSidecarMode decides which data plane a sidecar runs, given the
// agent's configured mode and the envoy binary found on the node ("" if
// none): Envoy where it is installed (or required), the built-in proxy
// otherwise. The client's sidecar hook and `meshlet connect sidecar` both
// decide through this function, so they always agree.
func ResolveSidecarMode(configured, envoyBinary string) (string, error) {
	switch configured {
	case "", SidecarAuto:
		if envoyBinary != "" {
			return SidecarEnvoy, nil
		}
		return SidecarBuiltin, nil
	case SidecarEnvoy:
		if envoyBinary == "" {
			return "", ErrNoEnvoy
		}
		return SidecarEnvoy, nil
	case SidecarBuiltin:
		return SidecarBuiltin, nil
	}
	return "", fmt.Errorf("%w: unknown sidecar mode %q (want auto, envoy or builtin)", ErrInvalid, configured)
}

// ProxyConcurrency is how many worker threads a sidecar proxy runs: Nomad's
// default (meta connect.proxy_concurrency = 1) for Envoy's --concurrency,
// and the built-in proxy's GOMAXPROCS. One thread matches a sidecar's
// default CPU share and spares it the cost of waking idle threads per
// request.
const ProxyConcurrency = 1

// EnvoyArgs are the arguments the sidecar task gives Envoy, as Nomad's
// default sidecar task does, followed by extra (a task's envoy_args).
// Envoy refuses an option given twice ("Argument already set!"; -l and
// --log-level are one option), so a default that extra sets itself is left
// out: envoy_args = ["-l", "debug"] or ["--concurrency", "2"] replace the
// default log level or concurrency.
func EnvoyArgs(bootstrapPath string, extra ...string) []string {
	args := []string{"-c", bootstrapPath}
	for _, d := range []struct {
		flags []string
		args  []string
	}{
		{[]string{"-l", "--log-level"}, []string{"-l", "info"}},
		{[]string{"--concurrency"}, []string{"--concurrency", strconv.Itoa(ProxyConcurrency)}},
		{[]string{"--disable-hot-restart"}, []string{"--disable-hot-restart"}},
	} {
		if !setsOption(extra, d.flags) {
			args = append(args, d.args...)
		}
	}
	return append(args, extra...)
}

// setsOption reports whether args give one of flags, alone or with its
// value in the same argument ("-l debug"), as Envoy's parser accepts.
func setsOption(args, flags []string) bool {
	for _, a := range args {
		for _, f := range flags {
			if a == f || strings.HasPrefix(a, f+" ") {
				return true
			}
		}
	}
	return false
}
