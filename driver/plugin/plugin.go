// Package plugin serves a driver.Driver from an external binary over
// hashicorp/go-plugin (gRPC) and loads such binaries back as driver.Drivers.
//
// Wire contract. There is no protoc on the build hosts, so the service is
// described by hand (serviceDesc) and every message is JSON: each call uses
// the gRPC content-subtype "json" (content-type application/grpc+json),
// served by a codec forced on the plugin's own client calls and server
// only (never registered process-wide). The service is
// "meshlet.driver.v1.Driver":
//
//	Name(empty) → nameResponse            Fingerprint(empty) → driver.Fingerprint
//	StartTask(driver.TaskConfig) → driver.TaskHandle
//	RecoverTask(driver.TaskHandle) → empty
//	StopTask(stopRequest) → empty         DestroyTask(destroyRequest) → empty
//	InspectTask(taskIDRequest) → taskStatus
//	TaskStats(taskIDRequest) → driver.TaskResourceUsage
//	SignalTask(signalRequest) → empty     ExecTask(execRequest) → execResponse
//	WaitTask(taskIDRequest) → stream exitResult   (header first, then one message)
//	ExecTaskStreaming(stream execStreamIn) → stream execStreamOut
//
// Durations are integer nanoseconds; byte slices base64 (encoding/json).
// Errors travel as gRPC status codes that map back to the driver sentinels
// (NotFound ↔ ErrTaskNotFound, AlreadyExists ↔ ErrTaskExists,
// FailedPrecondition ↔ ErrHandleVersion, Unimplemented ↔ ErrNotSupported,
// Canceled/DeadlineExceeded ↔ the context errors); errors inside a response
// body (an exit's error, a timed-out exec) are {kind, message} pairs with
// the same mapping. The handshake is ProtocolVersion 1 with the magic
// cookie MESHLET_DRIVER_PLUGIN.
//
// Concurrency: a Client is safe for concurrent use (gRPC multiplexes
// calls); the server calls the served driver concurrently, as the
// driver.Driver contract allows.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/meshlet/meshlet/driver"
)

// Handshake is shared by meshlet and its driver plugins. It is a UX check
// (a plugin binary run by hand says so), not a security measure.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "MESHLET_DRIVER_PLUGIN",
	MagicCookieValue: "5c0d1f4e-meshlet-task-driver",
}

// pluginName is the single plugin each binary serves.
const pluginName = "driver"

// driverPlugin is the go-plugin GRPCPlugin for a driver.
type driverPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	impl driver.Driver // server side only
}

// GRPCServer registers the driver service.
func (p *driverPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(&serviceDesc, &server{impl: p.impl})
	return nil
}

// GRPCClient returns the Client for the connection.
func (p *driverPlugin) GRPCClient(ctx context.Context, _ *goplugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return &Client{cc: cc, ctx: ctx}, nil
}

// Serve serves d as a driver plugin; call it from an external driver
// binary's main. It returns when the agent ends the plugin. Log with
// hclog (JSON on stderr) so the agent can relay the plugin's logs. A
// binary serving rawexec or exec is also their executor: its main must
// first dispatch `<binary> executor ...` to executor.Main (see
// testdata/echodriver).
func Serve(d driver.Driver) {
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         goplugin.PluginSet{pluginName: &driverPlugin{impl: d}},
		GRPCServer:      newGRPCServer,
		Logger:          hclog.New(&hclog.LoggerOptions{Name: "driver-plugin", Output: os.Stderr, JSONFormat: true}),
	})
}

// Load launches every executable regular file in dir as a driver plugin
// and returns one driver per plugin, named by the plugin, plus a cleanup
// that kills the plugin processes (tasks themselves run under their
// executors and survive). On any error every plugin already started is
// killed and nothing is returned.
func Load(dir string, logger hclog.Logger) ([]driver.Driver, func(), error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	logger = logger.Named("plugin")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to read plugin dir: %w", err)
	}
	var clients []*goplugin.Client
	cleanup := func() {
		for _, c := range clients {
			c.Kill()
		}
	}
	var drivers []driver.Driver
	seen := map[string]string{}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		info, err := os.Stat(path)
		if err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
			continue
		}
		gc := goplugin.NewClient(&goplugin.ClientConfig{
			HandshakeConfig:  Handshake,
			Plugins:          goplugin.PluginSet{pluginName: &driverPlugin{}},
			Cmd:              exec.Command(path),
			AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
			Logger:           logger.With("path", path),
		})
		clients = append(clients, gc)
		c, err := dispense(gc)
		if err == nil && seen[c.name] != "" {
			err = fmt.Errorf("driver %q is also served by %s", c.name, seen[c.name])
		}
		if err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("failed to load driver plugin %s: %w", path, err)
		}
		seen[c.name] = path
		logger.Info("loaded driver plugin", "path", path, "driver", c.name)
		drivers = append(drivers, c)
	}
	return drivers, cleanup, nil
}

// newGRPCServer builds the plugin's gRPC server with the plugin codec
// forced on it (see codec).
func newGRPCServer(opts []grpc.ServerOption) *grpc.Server {
	return grpc.NewServer(append(opts, grpc.ForceServerCodecV2(codec))...)
}

// dispense connects to the plugin and fetches its name.
func dispense(gc *goplugin.Client) (*Client, error) {
	rpc, err := gc.Client()
	if err != nil {
		return nil, err
	}
	raw, err := rpc.Dispense(pluginName)
	if err != nil {
		return nil, err
	}
	c, ok := raw.(*Client)
	if !ok {
		return nil, fmt.Errorf("unexpected plugin type %T", raw)
	}
	if c.name, err = c.fetchName(); err != nil {
		return nil, err
	}
	if c.name == "" {
		return nil, errors.New("plugin reports an empty driver name")
	}
	return c, nil
}
