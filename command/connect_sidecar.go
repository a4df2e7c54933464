package command

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/envoy"
	"github.com/meshlet/meshlet/sidecar"
)

// sidecarOptions are the settings of `connect sidecar`.
type sidecarOptions struct {
	proxyID, service, grpcAddr, adminBind string
	envoyBinary, bootstrapPath            string
	// token is the sidecar's service identity token (-token-file), read
	// before any privilege drop; "" without one.
	token string
	// envoyArgs follow "--" and are appended to Envoy's command line.
	envoyArgs []string
}

// privDrop is what a sidecar started as root does about its privileges.
type privDrop struct {
	// user is who it drops to; "" keeps the current user.
	user string
	// missing: root was asked to drop to a user this host does not have,
	// so the sidecar keeps running as root.
	missing bool
}

func runConnectSidecar(e *env, c *command, args []string) int {
	fs := newFlags(c)
	o := &sidecarOptions{}
	fs.StringVar(&o.proxyID, "proxy-id", "", "the sidecar proxy's service `ID`")
	fs.StringVar(&o.service, "service", "", "the destination service `NAME`")
	fs.StringVar(&o.grpcAddr, "grpc-addr", "", "meshlet's gRPC `ADDR` (unix:///path inside the allocation)")
	fs.StringVar(&o.adminBind, "admin-bind", sidecar.DefaultAdminBind, "`ADDR` of the admin listener")
	mode := fs.String("mode", connect.SidecarAuto, "`MODE`: auto, envoy or builtin")
	fs.StringVar(&o.envoyBinary, "envoy-binary", "", "`PATH` of the envoy binary found on the node")
	fs.StringVar(&o.bootstrapPath, "bootstrap-path", "", "`PATH` of the Envoy bootstrap the client wrote")
	runAs := fs.String("user", connect.ProxyUser, "`USER` the proxy (built-in or Envoy) drops to when started as root (\"root\" keeps root)")
	tokenFile := fs.String("token-file", "", "`PATH` of the sidecar's service identity token (its x-consul-token); a missing file means none")
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if o.proxyID == "" || o.grpcAddr == "" {
		return e.usageError(c, "-proxy-id and -grpc-addr are required")
	}
	token, err := readTokenFile(*tokenFile)
	if err != nil {
		return e.errorf("sidecar: %v", err)
	}
	o.token = token
	o.envoyArgs = fs.Args()
	resolved, err := connect.ResolveSidecarMode(*mode, o.envoyBinary)
	if err != nil {
		return e.errorf("%v", err)
	}
	label := "built-in proxy"
	if resolved == connect.SidecarEnvoy {
		label = "envoy"
	}
	drop, err := e.sidecarPrivileges(*runAs, label)
	if err != nil {
		return e.errorf("%s: %v", label, err)
	}
	if resolved == connect.SidecarEnvoy {
		return e.runSidecarEnvoy(o, drop)
	}
	if len(o.envoyArgs) > 0 {
		fmt.Fprintf(e.stderr, "==> built-in proxy: ignoring the Envoy arguments %q\n", o.envoyArgs)
	}
	return e.runSidecarBuiltin(o, drop)
}

// sidecarPrivileges decides whether a sidecar drops to runAs: only when it
// runs as root and runAs is neither "" nor "root". A host without the user
// keeps running its sidecars as root, warned, rather than failing every
// connect allocation. Before a drop the process gets no_new_privs
// (ensureNoNewPrivs may execute it again, from the start).
func (e *env) sidecarPrivileges(runAs, label string) (privDrop, error) {
	if os.Geteuid() != 0 || runAs == "" || runAs == "root" {
		return privDrop{}, nil
	}
	if _, err := user.Lookup(runAs); err != nil {
		fmt.Fprintf(e.stderr, "==> %s: not dropping privileges: %v\n", label, err)
		return privDrop{missing: true}, nil
	}
	if err := ensureNoNewPrivs(); err != nil {
		return privDrop{}, err
	}
	return privDrop{user: runAs}, nil
}

// runSidecarBuiltin runs the built-in proxy after the drop. It needs only
// its allocation's socket (0666, reached from its directory), unprivileged
// ports and its standard streams, so it keeps no capability.
func (e *env) runSidecarBuiltin(o *sidecarOptions, drop privDrop) int {
	xdsAddr, err := socketFromDir(o.grpcAddr)
	if err != nil {
		return e.errorf("built-in proxy: %v", err)
	}
	if err := dropPrivileges(drop.user); err != nil {
		return e.errorf("built-in proxy: %v", err)
	}
	cfg := sidecar.Config{ProxyID: o.proxyID, Cluster: o.service, XDSAddr: xdsAddr, AdminBind: o.adminBind, Delta: true, Token: o.token}
	return e.runBuiltinProxy(cfg, "info", connect.ProxyConcurrency)
}

// errEnvoyArgsAsRoot refuses extra Envoy arguments for an Envoy that keeps
// root: flags such as --log-path would write any file on the host.
var errEnvoyArgsAsRoot = errors.New("extra Envoy arguments are refused while Envoy would run as root")

// runSidecarEnvoy executes Envoy. After a drop Envoy gets an in-memory copy
// of the bootstrap (the file stays root's, in the task's closed secrets
// dir) whose control plane socket is relative to the working directory it
// moves to first, the socket's own; and it keeps no capability, exactly as
// the built-in proxy (whose listeners need none either).
func (e *env) runSidecarEnvoy(o *sidecarOptions, drop privDrop) int {
	if drop.missing && len(o.envoyArgs) > 0 {
		return e.errorf("envoy: %v (the proxy user is missing on this host)", errEnvoyArgsAsRoot)
	}
	configPath := o.bootstrapPath
	if drop.user != "" {
		var err error
		if configPath, err = bootstrapForDroppedEnvoy(o.bootstrapPath); err != nil {
			return e.errorf("envoy: %v", err)
		}
		if err := dropPrivileges(drop.user); err != nil {
			return e.errorf("envoy: %v", err)
		}
	}
	fmt.Fprintf(e.stdout, "==> sidecar for %s: Envoy (%s)\n", o.service, o.envoyBinary)
	argv := append([]string{o.envoyBinary}, connect.EnvoyArgs(configPath, o.envoyArgs...)...)
	return e.errorf("failed to exec envoy: %v", execve(o.envoyBinary, argv))
}

// bootstrapForDroppedEnvoy reads the bootstrap at path while still root
// (not following a link at its last component), moves to the directory of
// its control plane socket and returns the /dev/fd path of an in-memory
// copy with that socket made relative (envoy.RelativeLocalAgent).
func bootstrapForDroppedEnvoy(path string) (string, error) {
	if path == "" {
		return "", errors.New("-bootstrap-path is required to run Envoy")
	}
	js, err := readFileNoFollow(path)
	if err != nil {
		return "", fmt.Errorf("failed to read the bootstrap: %w", err)
	}
	dir, js, err := envoy.RelativeLocalAgent(js)
	if err != nil {
		return "", err
	}
	if dir != "" {
		if err := os.Chdir(dir); err != nil {
			return "", fmt.Errorf("failed to enter the control plane socket's directory: %w", err)
		}
	}
	return envoy.MemFile(js)
}

// readFileNoFollow reads a regular file of at most 16 MiB without
// following a symbolic link at its last component.
func readFileNoFollow(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%v)", path, err)
	}
	const maxBootstrap = 16 << 20
	b, err := io.ReadAll(io.LimitReader(f, maxBootstrap+1))
	if err == nil && len(b) > maxBootstrap {
		err = fmt.Errorf("%s is larger than %d bytes", path, maxBootstrap)
	}
	return b, err
}

// readTokenFile reads a token file (not following a link at its last
// component): its content without surrounding space; "" for no path or a
// file that does not exist (ACLs disabled: the agent wrote none).
func readTokenFile(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := readFileNoFollow(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("failed to read the token file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
