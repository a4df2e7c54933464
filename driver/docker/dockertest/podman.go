package dockertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// StartPodman runs podman's Docker-compatible API service (`podman system
// service`) on a socket under a temporary directory, with its own storage
// root, and imports Image into it. Stop removes its containers, ends the
// service and its directories. It fails (the caller skips, saying why)
// when not root or podman is not installed (ErrUnavailable).
func StartPodman() (*Daemon, error) {
	if os.Getenv("MESHLET_SKIP_PRIVILEGED") == "1" {
		return nil, fmt.Errorf("%w: privileged tests skipped: MESHLET_SKIP_PRIVILEGED=1", ErrUnavailable)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: podman tests need root; run `sudo make test`", ErrUnavailable)
	}
	bin, err := exec.LookPath("podman")
	if err != nil {
		return nil, fmt.Errorf("%w: podman is not installed (apt-get install podman): %w", ErrUnavailable, err)
	}
	dir, err := os.MkdirTemp("", "mlpod")
	if err != nil {
		return nil, err
	}
	d := &Daemon{Host: "unix://" + filepath.Join(dir, "podman.sock"), dir: dir, done: make(chan struct{})}
	d.podman = []string{bin, "--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run")}
	logf, err := os.Create(filepath.Join(dir, "podman.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	d.cmd = exec.Command(d.podman[0], append(d.podman[1:], "system", "service", "--time=0", d.Host)...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.launch(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("failed to start podman system service: %w", err)
	}
	if err := d.ready("podman.log"); err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

// removePodmanContainers force-removes every container of a podman
// service's storage (podman has no daemon to stop them with it).
func (d *Daemon) removePodmanContainers() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append(append([]string(nil), d.podman[1:]...), "rm", "--all", "--force", "--time", "0")
	if out, err := exec.CommandContext(ctx, d.podman[0], args...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "dockertest: podman rm: %v: %s\n", err, out)
	}
}
