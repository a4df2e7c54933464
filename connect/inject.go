package connect

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/meshlet/meshlet/structs"
)

// Inject adds, for every ingress gateway service, its gateway task
// (injectGateways), and for every service with a sidecar_service, the sidecar's
// public-listener port to the group network and a prestart sidecar task
// `connect-proxy-<service>` merged with any sidecar_task override, and
// turns exposed checks into expose paths (exposeChecks). The
// task runs on the connect_proxy driver (ProxyDriver), which starts
// `meshlet connect sidecar`; that picks Envoy or the built-in proxy on the
// node. Inject is idempotent.
func Inject(job *structs.Job) error { return InjectWith(job, Options{}) }

// InjectWith is Inject with the sidecar driver opts choose. The sidecar
// task's driver is, in order: the service's sidecar_task driver; else
// opts.SidecarDriver (docker: the opts' Envoy image, see Options); else
// connect_proxy.
func InjectWith(job *structs.Job, opts Options) error {
	for _, tg := range job.TaskGroups {
		if err := injectGateways(tg, opts); err != nil {
			return err
		}
		services := ConnectServices(tg)
		if len(services) == 0 {
			continue
		}
		if err := checkNetwork(tg); err != nil {
			return err
		}
		if err := exposeChecks(tg); err != nil {
			return err
		}
		mesh := MeshServices(tg)
		for _, s := range services {
			label := SidecarPortLabel(s)
			ensureDynamicPort(tg.Networks[0], label)
			if ProxyTask(tg, s.Name) != nil {
				continue
			}
			t := proxyTask(tg.Name, s, slices.Index(mesh, s))
			opts.applyDriver(t, s)
			mergeSidecarTask(t, s.Connect.SidecarTask, opts)
			tg.Tasks = append([]*structs.Task{t}, tg.Tasks...)
		}
	}
	return nil
}

func checkNetwork(tg *structs.TaskGroup) error {
	if len(tg.Networks) != 1 {
		return fmt.Errorf("%w: group %q: connect sidecars need exactly one network block, found %d", ErrInvalid, tg.Name, len(tg.Networks))
	}
	mode := tg.Networks[0].Mode
	if mode != structs.NetworkModeBridge && !strings.HasPrefix(mode, structs.NetworkModeCNIPrefix) {
		return fmt.Errorf("%w: group %q: connect sidecars need network mode \"bridge\" or \"cni/<name>\", not %q", ErrInvalid, tg.Name, mode)
	}
	return nil
}

// SidecarPortLabel is the port label of a service's sidecar public
// listener: sidecar_service's port, or "connect-proxy-<service>".
func SidecarPortLabel(s *structs.Service) string {
	if p := s.Connect.SidecarService.Port; p != "" {
		return p
	}
	return ProxyPortLabel(s.Name)
}

func ensureDynamicPort(n *structs.NetworkResource, label string) {
	for _, p := range append(n.ReservedPorts, n.DynamicPorts...) {
		if p.Label == label {
			return
		}
	}
	n.DynamicPorts = append(n.DynamicPorts, structs.Port{Label: label, To: -1})
}

// ProxyDriver is the driver of the injected sidecar task (the built-in
// driver/connectproxy): its config is the sidecar's settings, not a
// command line, so sidecars need no raw_exec.
const ProxyDriver = "connect_proxy"

func proxyTask(group string, s *structs.Service, index int) *structs.Task {
	cpu, mem := DefaultProxyCPU, DefaultProxyMemoryMB
	files, size := 2, 2
	delay := DefaultShutdownDelay
	id := ProxyID(ServiceID("${NOMAD_ALLOC_ID}", group, s.Name, s.PortLabel))
	return &structs.Task{
		Name:      ProxyTaskName(s.Name),
		Kind:      KindPrefix + s.Name,
		Driver:    ProxyDriver,
		Lifecycle: &structs.TaskLifecycle{Hook: structs.TaskLifecycleHookPrestart, Sidecar: true},
		Config: map[string]any{
			"proxy_id":       id,
			"service":        s.Name,
			"grpc_addr":      "unix://" + SocketPath("${NOMAD_ALLOC_DIR}"),
			"admin_bind":     fmt.Sprintf("127.0.0.2:%d", AdminBasePort+index),
			"mode":           "${attr.meshlet.sidecar}",
			"envoy_binary":   "${attr.meshlet.envoy_binary}",
			"bootstrap_path": "${NOMAD_SECRETS_DIR}/envoy_bootstrap.json",
			"token_file":     "${NOMAD_SECRETS_DIR}/si_token",
		},
		Resources:     &structs.Resources{CPU: &cpu, MemoryMB: &mem},
		LogConfig:     &structs.LogConfig{MaxFiles: &files, MaxFileSizeMB: &size},
		ShutdownDelay: delay,
	}
}

// rawExecConfig is the default sidecar's config as a raw_exec command line
// (`meshlet connect sidecar` with one flag per key): what a sidecar_task
// that sets driver = "raw_exec" starts from, as before connect_proxy.
func rawExecConfig(c map[string]any) map[string]any {
	args := []any{"connect", "sidecar"}
	for _, k := range []string{"proxy_id", "service", "grpc_addr", "admin_bind", "mode", "envoy_binary", "bootstrap_path", "token_file"} {
		args = append(args, "-"+strings.ReplaceAll(k, "_", "-"), c[k])
	}
	return map[string]any{"command": "${attr.meshlet.binary}", "args": args}
}

// mergeSidecarTask applies a sidecar_task override: set fields replace the
// defaults; env and meta maps are merged key by key. Config keys are merged
// into the default's while the driver stays connect_proxy (an unknown key
// then fails the task with the driver's error); another driver starts from
// an empty config, except raw_exec, which starts from the same sidecar as a
// command line (rawExecConfig), so an override of command or args alone
// keeps working as it did, and docker, which starts from the Envoy
// container's config (image and args, Options), as in Nomad.
func mergeSidecarTask(t *structs.Task, o *structs.SidecarTask, opts Options) {
	if o == nil {
		return
	}
	if o.Name != "" {
		t.Name = o.Name
	}
	if o.User != "" {
		t.User = o.User
	}
	switch o.Driver {
	case "", ProxyDriver:
	case SidecarDriverDocker:
		opts.makeDocker(t)
	case "raw_exec":
		t.Driver, t.Config = o.Driver, rawExecConfig(t.Config)
	default:
		t.Driver, t.Config = o.Driver, map[string]any{}
	}
	maps.Copy(t.Config, o.Config)
	t.Env = mergeStrings(t.Env, o.Env)
	t.Meta = mergeStrings(t.Meta, o.Meta)
	if r := o.Resources; r != nil {
		if r.CPU != nil {
			t.Resources.CPU = r.CPU
		}
		if r.MemoryMB != nil {
			t.Resources.MemoryMB = r.MemoryMB
		}
		if r.MemoryMaxMB != nil {
			t.Resources.MemoryMaxMB = r.MemoryMaxMB
		}
	}
	if o.LogConfig != nil {
		t.LogConfig = o.LogConfig
	}
	if o.KillTimeout != nil {
		t.KillTimeout = o.KillTimeout
	}
	if o.ShutdownDelay != nil {
		t.ShutdownDelay = *o.ShutdownDelay
	}
	if o.KillSignal != "" {
		t.KillSignal = o.KillSignal
	}
}

func mergeStrings(base, over map[string]string) map[string]string {
	if len(over) == 0 {
		return base
	}
	out := make(map[string]string, len(base)+len(over))
	maps.Copy(out, base)
	maps.Copy(out, over)
	return out
}

// Mutator injects sidecars at job registration (a server.JobMutator) with
// its Options (the zero value: connect_proxy sidecars).
type Mutator struct{ Options Options }

// Name implements server.JobMutator.
func (Mutator) Name() string { return "connect" }

// Mutate implements server.JobMutator.
func (m Mutator) Mutate(job *structs.Job) ([]string, error) { return nil, InjectWith(job, m.Options) }
