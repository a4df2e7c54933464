// Package dockertest runs a private dockerd for a test binary: its own
// data root, exec root and socket under a temporary directory, no iptables
// and no bridge, so nothing it starts can reach past namespaces the tests
// make. It imports a local busybox image (no registry is contacted) and
// tears everything down when the tests end.
//
// Use it from TestMain:
//
//	var daemon *dockertest.Daemon
//	func TestMain(m *testing.M) { os.Exit(dockertest.Main(m, &daemon)) }
//
// and call daemon.Require(t) (nil-safe) at the top of each test that needs
// it: the test is skipped, saying why, when not root or dockerd or busybox
// is missing, and fails when they are there but the daemon did not start.
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// Image is the busybox image every daemon gets, built from the host's
// static /bin/busybox.
const Image = "meshlet-test/busybox:latest"

// ImagePath is the PATH Image sets.
const ImagePath = "/opt/test/bin:/usr/bin:/bin"

// busyboxPath is the static busybox the image is built from.
const busyboxPath = "/bin/busybox"

// applets are linked into the image's /bin.
var applets = []string{"sh", "echo", "sleep", "cat", "head", "true", "false", "id", "ls", "env", "pwd", "dd", "kill", "yes", "tail", "tr", "wget", "grep", "cut", "httpd"}

// Daemon is a running private dockerd. A nil Daemon is one that could not
// start; Require skips.
type Daemon struct {
	// Host is the daemon's endpoint, "unix://<dir>/docker.sock".
	Host string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	// podman is the podman command and its storage flags, for a podman
	// service (StartPodman); nil for dockerd.
	podman []string
}

// ErrUnavailable marks a daemon that cannot run here (not root, privileged
// tests turned off, dockerd, podman or busybox not installed): a test
// skips on it. Any other error of Start is a daemon that should have run
// and did not: a test fails on it.
var ErrUnavailable = errors.New("unavailable")

// errStart is why no daemon runs (set by Main).
var errStart = fmt.Errorf("%w: dockertest.Main was not called from TestMain", ErrUnavailable)

// Main starts a daemon into *d (left nil, with the reason recorded, when it
// cannot run here), runs the tests and stops the daemon.
func Main(m *testing.M, d **Daemon) int {
	daemon, err := Start()
	if err != nil {
		errStart = err
		fmt.Fprintln(os.Stderr, "dockertest: no private dockerd, docker tests will skip or fail:", err)
	}
	*d = daemon
	code := m.Run()
	if daemon != nil {
		daemon.Stop()
	}
	return code
}

// Require skips t when no daemon can run here (ErrUnavailable) and fails
// it when one could but did not start.
func (d *Daemon) Require(t testing.TB) {
	t.Helper()
	if d == nil {
		SkipOrFail(t, errStart)
	}
}

// SkipOrFail ends t on err, an error of Start or StartWith: a skip when
// the daemon cannot run here (ErrUnavailable), a failure otherwise, so a
// host that has everything the tests need never skips them silently.
func SkipOrFail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrUnavailable) {
		t.Skip("no private daemon: ", err)
	}
	t.Fatal("the private daemon did not start: ", err)
}

// Client is a client for d with API version negotiation.
func (d *Daemon) Client(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.NewClientWithOpts(client.WithHost(d.Host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Options tune the daemon StartWith runs.
type Options struct {
	// NetNS, when set, is the path of a network namespace dockerd runs in
	// (through nsenter), configured as a system dockerd is: iptables on,
	// its docker0 bridge. Its rules (a DROP policy on FORWARD among them)
	// go into that namespace's firewall, never the host's.
	NetNS string
}

// Start starts a private dockerd and imports Image into it.
func Start() (*Daemon, error) { return StartWith(Options{}) }

// StartWith starts a private dockerd tuned by o and imports Image into it.
func StartWith(o Options) (*Daemon, error) {
	if os.Getenv("MESHLET_SKIP_PRIVILEGED") == "1" {
		return nil, fmt.Errorf("%w: privileged tests skipped: MESHLET_SKIP_PRIVILEGED=1", ErrUnavailable)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: docker tests need root; run `sudo make test`", ErrUnavailable)
	}
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		return nil, fmt.Errorf("%w: dockerd is not installed (apt-get install docker.io): %w", ErrUnavailable, err)
	}
	if _, err := os.Stat(busyboxPath); err != nil {
		return nil, fmt.Errorf("%w: the test image needs a static busybox (apt-get install busybox-static): %w", ErrUnavailable, err)
	}
	dir, err := os.MkdirTemp("", "mldock")
	if err != nil {
		return nil, err
	}
	d := &Daemon{Host: "unix://" + filepath.Join(dir, "docker.sock"), dir: dir, done: make(chan struct{})}
	logf, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	args := []string{"--data-root", filepath.Join(dir, "root"), "--exec-root", filepath.Join(dir, "exec"),
		"-H", d.Host, "--pidfile", filepath.Join(dir, "pid")}
	if o.NetNS == "" {
		d.cmd = exec.Command(bin, append(args, "--iptables=false", "--ip6tables=false", "--bridge=none")...)
	} else {
		// nsenter enters the namespace and execs dockerd (no fork: the
		// daemon is the command's process).
		d.cmd = exec.Command("nsenter", append([]string{"--net=" + o.NetNS, bin}, append(args, "--iptables=true")...)...)
	}
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.launch(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("failed to start dockerd: %w", err)
	}
	if err := d.ready("dockerd.log"); err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

// launch starts d.cmd and closes d.done when it exits.
//
// Pdeathsig fires when the OS thread that forked the daemon exits, not the
// process: Go ends threads (those a goroutine left locked, as the netns
// tests do), which would kill the daemon mid-test. So the fork happens on
// a thread locked by a goroutine that lives, waiting, as long as the
// daemon does.
func (d *Daemon) launch() error {
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := d.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = d.cmd.Wait()
		close(d.done)
	}()
	return <-started
}

// ready waits for the socket to answer, then imports the image; logName
// is the daemon's log in d.dir, quoted when it exits early.
func (d *Daemon) ready(logName string) error {
	c, err := client.NewClientWithOpts(client.WithHost(d.Host), client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		if _, err := c.Ping(ctx); err == nil {
			break
		}
		select {
		case <-d.done:
			log, _ := os.ReadFile(filepath.Join(d.dir, logName))
			return fmt.Errorf("the daemon exited early: %s", tail(log))
		case <-ctx.Done():
			return errors.New("the daemon did not answer within 60s")
		case <-time.After(100 * time.Millisecond):
		}
	}
	return ImportBusybox(ctx, c, Image)
}

// ImportBusybox imports a rootfs with the host's static busybox, its
// applets, /tmp and an /etc/passwd naming root and nobody, as ref, with
// PATH ImagePath.
func ImportBusybox(ctx context.Context, c *client.Client, ref string) error {
	return ImportBusyboxWith(ctx, c, ref, nil)
}

// File is an extra file of an image ImportBusyboxWith builds.
type File struct {
	// Name is the path in the image, without a leading slash.
	Name string
	Mode int64
	Data []byte
}

// ImportBusyboxWith is ImportBusybox with extra files (in existing
// directories: bin/, tmp/, etc/) and extra Dockerfile changes such as
// `ENTRYPOINT ["/bin/script"]`.
func ImportBusyboxWith(ctx context.Context, c *client.Client, ref string, extra []File, changes ...string) error {
	rootfs, err := busyboxTar(extra)
	if err != nil {
		return err
	}
	rc, err := c.ImageImport(ctx, image.ImportSource{Source: rootfs, SourceName: "-"}, ref,
		image.ImportOptions{Changes: append([]string{"ENV PATH=" + ImagePath}, changes...)})
	if err != nil {
		return fmt.Errorf("failed to import %s: %w", ref, err)
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return fmt.Errorf("failed to import %s: %w", ref, err)
	}
	return nil
}

func busyboxTar(extra []File) (io.Reader, error) {
	bb, err := os.ReadFile(busyboxPath)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := []string{"bin/", "tmp/", "etc/"}
	for _, dir := range dirs {
		mode := int64(0o755)
		if dir == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: mode}); err != nil {
			return nil, err
		}
	}
	files := append([]File{
		{"bin/busybox", 0o755, bb},
		{"etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		{"etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n")},
	}, extra...)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.Name, Mode: f.Mode, Size: int64(len(f.Data)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	for _, a := range applets {
		if err := tw.WriteHeader(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return &buf, nil
}

// Stop kills the daemon (and the containers it runs, through its
// shutdown), waits for it, and removes its directories.
func (d *Daemon) Stop() {
	if d.podman != nil {
		d.removePodmanContainers()
	}
	if d.cmd.Process != nil {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			<-d.done
		}
	}
	unmountUnder(d.dir)
	if err := os.RemoveAll(d.dir); err != nil {
		fmt.Fprintln(os.Stderr, "dockertest: failed to remove", d.dir+":", err)
	}
}

// unmountUnder detaches whatever dockerd left mounted below dir (its
// overlay or netns mounts), deepest first, so dir can be removed.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var mounts []string
	for _, line := range bytes.Split(data, []byte("\n")) {
		fields := bytes.Fields(line)
		if len(fields) > 4 {
			if p := string(fields[4]); p == dir || len(p) > len(dir) && p[:len(dir)+1] == dir+"/" {
				mounts = append(mounts, p)
			}
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
	}
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
