package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// peerProxy is one peer proxy pair (nginx or HAProxy): its client side in
// the client allocation's namespace and its server side in the server
// allocation's, with configurations generated from a peerLayout.
type peerProxy struct {
	name   string // "nginx", "HAProxy"
	bin    string
	layout peerLayout
	conf   func(l peerLayout, side string) string
	// run and check build the command lines that serve a configuration
	// in the foreground and that validate it.
	run, check func(p *peerProxy, path, side string) []string
	cmds       map[string]*exec.Cmd // by side, once started
}

func newNginx(l peerLayout) *peerProxy {
	args := func(p *peerProxy, path, side string) []string {
		dir := p.layout.sideDir(side)
		return []string{"-c", path, "-p", dir, "-e", filepath.Join(dir, "error.log")}
	}
	return &peerProxy{name: "nginx", bin: "nginx", layout: l, conf: nginxConf, run: args,
		check: func(p *peerProxy, path, side string) []string {
			return append([]string{"-t", "-q"}, args(p, path, side)...)
		}}
}

func newHAProxy(l peerLayout) *peerProxy {
	return &peerProxy{name: "HAProxy", bin: "haproxy", layout: l, conf: haproxyConf,
		run:   func(_ *peerProxy, path, _ string) []string { return []string{"-db", "-f", path} },
		check: func(_ *peerProxy, path, _ string) []string { return []string{"-c", "-q", "-f", path} }}
}

// nginxStreamModule is Debian's dynamic stream module (libnginx-mod-stream),
// "" when it is not there (built in, or missing: nginx -t then says so).
func nginxStreamModule() string {
	const path = "/usr/lib/nginx/modules/ngx_stream_module.so"
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}

// checkArgs is the validating command line for a written configuration.
func (p *peerProxy) checkArgs(path, side string) []string { return p.check(p, path, side) }

// writeConf writes one side's configuration into its directory.
func (p *peerProxy) writeConf(side string) (string, error) {
	dir := p.layout.sideDir(side)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("failed to create %s %s dir: %w", p.name, side, err)
	}
	path := filepath.Join(dir, p.bin+".conf")
	if err := os.WriteFile(path, []byte(p.conf(p.layout, side)), 0o644); err != nil {
		return "", fmt.Errorf("failed to write %s %s config: %w", p.name, side, err)
	}
	return path, nil
}

// start runs the server side in serverNS and the client side in clientNS
// (namespace names under /var/run/netns), each in the foreground under
// `ip netns exec`, which execs the proxy: the command's PID is the
// proxy's. On failure what was started is stopped.
func (p *peerProxy) start(clientNS, serverNS string) error {
	if _, err := exec.LookPath(p.bin); err != nil {
		return fmt.Errorf("%w: %s (scripts/bench.sh installs it)", ErrMissingTool, p.bin)
	}
	p.cmds = map[string]*exec.Cmd{}
	for _, s := range []struct{ side, ns string }{{"server", serverNS}, {"client", clientNS}} {
		if err := p.startSide(s.side, s.ns); err != nil {
			p.stop()
			return err
		}
	}
	return nil
}

func (p *peerProxy) startSide(side, ns string) error {
	path, err := p.writeConf(side)
	if err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(p.layout.sideDir(side), "output.log"))
	if err != nil {
		return fmt.Errorf("failed to create %s %s log: %w", p.name, side, err)
	}
	defer logf.Close()
	cmd := InNetns(context.Background(), ns, p.bin, p.run(p, path, side)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("failed to start %s %s side: %w", p.name, side, err)
	}
	p.cmds[side] = cmd
	time.Sleep(300 * time.Millisecond)
	if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
		out, _ := os.ReadFile(logf.Name())
		return fmt.Errorf("%s %s side exited at start: %s", p.name, side, lastLines(string(out), 3, nil))
	}
	return nil
}

// procs are the running sides' PIDs, named as the sidecars are.
func (p *peerProxy) procs() map[string]int {
	out := map[string]int{}
	for side, cmd := range p.cmds {
		out[side+" sidecar"] = cmd.Process.Pid
	}
	return out
}

// stop terminates both sides (SIGTERM, then SIGKILL after 5 s); stopping
// a proxy that is not running is not an error.
func (p *peerProxy) stop() {
	for side, cmd := range p.cmds {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		delete(p.cmds, side)
	}
}

// errPeerDown marks a peer that could not be started; its rows say why.
var errPeerDown = errors.New("peer proxy not running")
