package connect

import (
	"fmt"
	"slices"

	"github.com/meshlet/meshlet/structs"
)

// Sidecar drivers: the driver of an injected sidecar task that no
// sidecar_task override gives one (the servers' agent config
// connect { sidecar_driver }).
const (
	// SidecarDriverProxy runs sidecars on the connect_proxy driver
	// (`meshlet connect sidecar`: the node's Envoy, else the built-in
	// proxy). The default.
	SidecarDriverProxy = ProxyDriver
	// SidecarDriverDocker runs sidecars as docker containers of an Envoy
	// image, as Nomad does: the client writes the Envoy bootstrap into
	// the task's secrets directory.
	SidecarDriverDocker = "docker"
)

// DefaultSidecarImage is the Envoy image of docker sidecars when
// connect { sidecar_image } is unset (Nomad's meta.connect.sidecar_image is
// envoyproxy/envoy:v${NOMAD_envoy_version}).
const DefaultSidecarImage = "envoyproxy/envoy:v1.34.1"

// Where a docker sidecar's container sees the Envoy bootstrap and the
// control plane socket: the docker driver mounts the task's secrets/ at
// /secrets and the allocation's shared alloc/ at /alloc.
const (
	ContainerBootstrapPath = "/secrets/envoy_bootstrap.json"
	containerAllocDir      = "/alloc"
)

// ContainerSocketPath is the control plane socket as a docker sidecar's
// container sees it.
func ContainerSocketPath() string { return SocketPath(containerAllocDir) }

// RuntimeBootstrapFile is the Envoy bootstrap the client writes, in a
// connect_proxy sidecar's secrets directory, for the container its node may
// run it as (the connect_proxy driver's docker runtime): the control plane
// socket at the container's path. It sits beside envoy_bootstrap.json,
// which names the socket at the host's path for the host's Envoy, so a
// sidecar restarted on another runtime still finds its own.
const RuntimeBootstrapFile = "envoy_bootstrap.container.json"

// RuntimeBootstrapPath is RuntimeBootstrapFile as the container sees it.
const RuntimeBootstrapPath = "/secrets/" + RuntimeBootstrapFile

// Options choose how Inject builds the sidecar task.
type Options struct {
	// SidecarDriver is SidecarDriverProxy ("" too) or SidecarDriverDocker.
	SidecarDriver string
	// SidecarImage is the docker sidecar's image; "" is
	// DefaultSidecarImage.
	SidecarImage string
}

// Validate checks the options.
func (o Options) Validate() error {
	if !slices.Contains([]string{"", SidecarDriverProxy, SidecarDriverDocker}, o.SidecarDriver) {
		return fmt.Errorf("%w: sidecar_driver %q must be %q or %q", ErrInvalid, o.SidecarDriver, SidecarDriverProxy, SidecarDriverDocker)
	}
	return nil
}

func (o Options) image() string {
	if o.SidecarImage != "" {
		return o.SidecarImage
	}
	return DefaultSidecarImage
}

// applyDriver turns the default sidecar t into a docker sidecar when the
// options ask for one and the service's sidecar_task names no driver of its
// own (the sidecar_task then merges into it).
func (o Options) applyDriver(t *structs.Task, s *structs.Service) {
	if o.SidecarDriver != SidecarDriverDocker {
		return
	}
	if st := s.Connect.SidecarTask; st != nil && st.Driver != "" {
		return
	}
	o.makeDocker(t)
}

// EnvoyUIDEnv is set to "0" in a docker sidecar's environment: the
// official Envoy image's entrypoint otherwise drops to its envoy user,
// who cannot read the bootstrap the client writes for the task's user
// (root, 0600). A sidecar_task env may override it.
const EnvoyUIDEnv = "ENVOY_UID"

// makeDocker turns t into the docker sidecar: the Envoy image, Nomad's
// arguments, ENVOY_UID=0.
func (o Options) makeDocker(t *structs.Task) {
	t.Driver, t.Config = SidecarDriverDocker, o.dockerConfig()
	t.Env = mergeStrings(t.Env, map[string]string{EnvoyUIDEnv: "0"})
}

// dockerConfig is Nomad's docker sidecar config: the Envoy image with
// `-c <bootstrap> -l info --concurrency 1 --disable-hot-restart`.
func (o Options) dockerConfig() map[string]any {
	return DockerSidecarConfig(o.image(), ContainerBootstrapPath, nil)
}

// DockerSidecarConfig is a docker sidecar task's config: image run with
// Nomad's Envoy arguments for the bootstrap at bootstrapPath (the
// container's path), then extra (which replaces a default it repeats, see
// EnvoyArgs).
func DockerSidecarConfig(image, bootstrapPath string, extra []string) map[string]any {
	args := []any{}
	for _, a := range EnvoyArgs(bootstrapPath, extra...) {
		args = append(args, a)
	}
	return map[string]any{"image": image, "args": args}
}

// IsDockerSidecar reports whether an injected sidecar task runs as a
// docker container (and so needs its bootstrap written, with the
// container's paths, whatever the node's sidecar mode).
func IsDockerSidecar(t *structs.Task) bool { return t.Driver == SidecarDriverDocker }
