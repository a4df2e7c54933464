// Package connectproxy is the connect_proxy task driver: it runs the sidecar
// proxy of a connect service, `meshlet connect sidecar`, so sidecars need
// neither raw_exec nor any other driver that runs a job's command as root.
// A task's config is not a command line but the sidecar's settings
// (proxy_id, service, grpc_addr, admin_bind, mode, envoy_binary,
// bootstrap_path, envoy_args); the driver builds the command from them
// with the agent's own meshlet binary. The sidecar starts as the task's user
// (root unless the task sets one) in the allocation's network namespace and
// drops to the proxy user itself (see command connect sidecar); so a job
// cannot point it at another binary, another allocation's socket, a file
// outside the task's secrets or a dynamic loader variable. Like raw_exec it
// runs tasks under a detached executor (driver/internal/proc) so they
// survive agent restarts; unlike raw_exec it is always enabled.
//
// Runtimes: each StartTask picks how the node runs the sidecar, the first
// of Config.Runtimes that can (runtime.go): RuntimeDocker runs Nomad's
// Envoy container through the node's docker driver (container.go), which
// then serves every call for that task (RecoverTask included: the handle
// says which runtime runs it); RuntimeEnvoy and RuntimeBuiltin run
// `meshlet connect sidecar` under the executor. A task whose mode is envoy
// or builtin gets that runtime.
//
// Concurrency: a Driver is safe for concurrent use; mu guards the set of
// tasks that run as containers.
package connectproxy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/internal/proc"
)

// Name is the driver's jobspec name.
const Name = "connect_proxy"

// Config configures the driver.
type Config struct {
	// Binary is the meshlet executable a sidecar runs: the agent's own, the
	// node attribute meshlet.binary. Default: os.Executable().
	Binary string
	// EnvoyBinary is the envoy binary the agent found ("" if none), the
	// only one a task may name in envoy_binary.
	EnvoyBinary string
	// ExecutorCmd runs the executor (driver/executor.Main); default
	// [os.Executable(), "executor"].
	ExecutorCmd []string
	// StateDir keeps per-task executor state; it must survive agent
	// restarts. Default "<os.TempDir()>/meshlet-connect_proxy".
	StateDir string
	// Runtimes is the order in which the node tries the sidecar runtimes
	// (RuntimeDocker, RuntimeEnvoy, RuntimeBuiltin); default
	// DefaultRuntimes. See ValidateRuntimes.
	Runtimes []string
	// Docker is the node's docker driver (nil: none, or disabled), which
	// runs the RuntimeDocker sidecars.
	Docker ContainerDriver
	// EnvoyImage is the docker runtime's Envoy image; default
	// connect.DefaultSidecarImage.
	EnvoyImage string
	// EnvoyImagePull lets the docker runtime pull EnvoyImage when it is not
	// present (a failed pull passes to the next runtime); off, the docker
	// runtime runs only where the image is present.
	EnvoyImagePull bool
}

// Driver is the connect_proxy driver. It implements driver.Driver and
// driver.StreamingExecer.
type Driver struct {
	*proc.Driver
	cfg    Config
	logger hclog.Logger

	mu sync.RWMutex
	// containers are the tasks running as docker containers (RuntimeDocker).
	containers map[string]bool
}

// New returns a connect_proxy driver. It logs with logger as given, so name
// it for the driver (the agent's is agent.driver.connect_proxy).
func New(cfg Config, logger hclog.Logger) *Driver {
	if cfg.Binary == "" {
		self, err := os.Executable()
		if err != nil {
			self = "/proc/self/exe"
		}
		cfg.Binary = self
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if len(cfg.Runtimes) == 0 {
		cfg.Runtimes = DefaultRuntimes
	}
	if cfg.EnvoyImage == "" {
		cfg.EnvoyImage = connect.DefaultSidecarImage
	}
	d := &Driver{cfg: cfg, logger: logger, containers: map[string]bool{}}
	d.Driver = proc.New(proc.Options{
		Name:        Name,
		ExecutorCmd: cfg.ExecutorCmd,
		StateDir:    cfg.StateDir,
		Fingerprint: d.fingerprint,
		Launch:      d.launch,
	}, logger)
	return d
}

// fingerprint: detected always, healthy when the meshlet binary is there;
// driver.connect_proxy.runtimes lists the runtimes that can run a sidecar
// now, in the node's order.
func (d *Driver) fingerprint(ctx context.Context) (*driver.Fingerprint, error) {
	fp := &driver.Fingerprint{Detected: true, Attributes: map[string]string{
		"driver." + Name:               "1",
		"driver." + Name + ".runtimes": strings.Join(d.runtimesAvailable(ctx), ","),
	}}
	st, err := os.Stat(d.cfg.Binary)
	switch {
	case err != nil:
		fp.HealthDescription = fmt.Sprintf("meshlet binary unavailable: %v", err)
	case !st.Mode().IsRegular() || st.Mode()&0o111 == 0:
		fp.HealthDescription = fmt.Sprintf("meshlet binary %s is not an executable file", d.cfg.Binary)
	default:
		fp.Healthy, fp.HealthDescription = true, "healthy"
	}
	return fp, nil
}

// launch turns a task's config into `<meshlet> connect sidecar ...`.
func (d *Driver) launch(cfg *driver.TaskConfig) (*proc.Launch, error) {
	tc, err := ParseConfig(cfg.Config)
	if err != nil {
		return nil, driver.Unrecoverable(err)
	}
	if cfg.NetNSPath == "" && tc.NetworkMode != "host" {
		return nil, driver.Unrecoverable(fmt.Errorf("%w; its group needs network mode \"bridge\" or \"cni/<name>\"", ErrNoNetworkNamespace))
	}
	if err := d.confine(cfg, tc); err != nil {
		return nil, driver.Unrecoverable(err)
	}
	return &proc.Launch{Command: d.cfg.Binary, Args: tc.Args(), Env: d.safeEnv(cfg)}, nil
}

// confine holds a config to what the task's own sidecar uses: its
// allocation's control plane socket, a bootstrap in its secrets dir and
// the node's envoy binary. The sidecar starts as root (unless the task sets
// a user) and runs Envoy as root where the proxy user is missing, so a job
// must not name another binary or file through it.
func (d *Driver) confine(cfg *driver.TaskConfig, tc *TaskConfig) error {
	if cfg.AllocDir == "" {
		return fmt.Errorf("%w: task %s has no allocation directory", ErrInvalidConfig, cfg.Name)
	}
	sock := connect.SocketPath(cfg.AllocDir)
	if p, ok := strings.CutPrefix(tc.GRPCAddr, "unix://"); !ok || filepath.Clean(p) != sock {
		return fmt.Errorf("%w: grpc_addr %q is not the allocation's control plane socket unix://%s", ErrInvalidConfig, tc.GRPCAddr, sock)
	}
	for _, f := range []struct {
		key  string
		path *string
	}{{keyBootstrapPath, &tc.BootstrapPath}, {keyTokenFile, &tc.TokenFile}} {
		p, err := inSecrets(cfg.TaskDir, f.key, *f.path)
		if err != nil {
			return err
		}
		*f.path = p
	}
	switch {
	case tc.EnvoyBinary == "" || tc.EnvoyBinary == d.cfg.EnvoyBinary:
	case d.cfg.EnvoyBinary == "":
		return fmt.Errorf("%w: envoy_binary %q: this node has no envoy binary", ErrInvalidConfig, tc.EnvoyBinary)
	default:
		return fmt.Errorf("%w: envoy_binary %q is not this node's envoy binary %s", ErrInvalidConfig, tc.EnvoyBinary, d.cfg.EnvoyBinary)
	}
	return nil
}

// inSecrets resolves p (relative to taskDir) and refuses a path outside
// the task's secrets dir; "" stays "".
func inSecrets(taskDir, key, p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(taskDir, p)
	}
	secrets := filepath.Join(taskDir, "secrets")
	if p = filepath.Clean(p); !strings.HasPrefix(p, secrets+string(filepath.Separator)) {
		return "", fmt.Errorf("%w: %s %q is not in the task's secrets dir %s", ErrInvalidConfig, key, p, secrets)
	}
	return p, nil
}

// unsafeEnv are the variables glibc drops for privileged programs (its
// UNSECURE_ENVVARS; every LD_* is dropped too): they would let a job load
// code into the sidecar while it still runs as root.
var unsafeEnv = map[string]bool{
	"GCONV_PATH": true, "GETCONF_DIR": true, "GLIBC_TUNABLES": true, "HOSTALIASES": true, "LOCALDOMAIN": true,
	"LOCPATH": true, "MALLOC_TRACE": true, "NIS_PATH": true, "NLSPATH": true, "RESOLV_HOST_CONF": true,
	"RES_OPTIONS": true, "TMPDIR": true, "TZDIR": true,
}

// safeEnv is the task's env without unsafeEnv and LD_* (warned about).
func (d *Driver) safeEnv(cfg *driver.TaskConfig) map[string]string {
	env := make(map[string]string, len(cfg.Env))
	var dropped []string
	for k, v := range cfg.Env {
		if unsafeEnv[k] || strings.HasPrefix(k, "LD_") {
			dropped = append(dropped, k)
			continue
		}
		env[k] = v
	}
	if len(dropped) > 0 {
		slices.Sort(dropped)
		d.logger.Warn("ignoring env vars unsafe for a process started as root", "alloc_id", cfg.AllocID, "task", cfg.Name,
			"vars", strings.Join(dropped, ","))
	}
	return env
}
