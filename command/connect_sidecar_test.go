package command

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/envoy"
	"github.com/meshlet/meshlet/internal/testutil"
)

// sidecarLayout is an allocation's directories as the client makes them,
// below a directory closed to all but root (t.TempDir's parent is 0700),
// with the Envoy bootstrap the client writes: root's, 0600, in the task's
// 0700 secrets dir.
type sidecarLayout struct {
	taskDir, runDir, sock, bootstrap, proxyID string
	js                                        []byte
}

func newSidecarLayout(t *testing.T) sidecarLayout {
	t.Helper()
	alloc := filepath.Join(t.TempDir(), "alloc", "a1")
	l := sidecarLayout{taskDir: filepath.Join(alloc, "connect-proxy-web"), runDir: filepath.Join(alloc, "alloc", "run"),
		proxyID: "_nomad-task-a1-group-web-web-http-sidecar-proxy"}
	l.sock = filepath.Join(l.runDir, connect.SocketName)
	l.bootstrap = filepath.Join(l.taskDir, "secrets", "envoy_bootstrap.json")
	for dir, mode := range map[string]os.FileMode{l.runDir: 0o755, filepath.Dir(l.bootstrap): 0o700} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
	}
	js, err := envoy.JSON(envoy.BootstrapConfig{ProxyID: l.proxyID, Cluster: "web", GRPCAddr: "unix://" + l.sock})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.bootstrap, js, 0o600); err != nil {
		t.Fatal(err)
	}
	l.js = js
	return l
}

// fakeEnvoy writes, where any user may run it, a stand-in envoy that
// prints who it runs as, its capabilities and no_new_privs, its working
// directory and arguments, whether it can read the bootstrap file itself
// ($FAKE_ENVOY_SECRET), then the bootstrap it was handed (-c).
func fakeEnvoy(t *testing.T) string {
	t.Helper()
	script := `#!/bin/sh
echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"
grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/$$/status
echo "cwd=$(pwd)"
echo "args=$*"
if cat "$FAKE_ENVOY_SECRET" >/dev/null 2>&1; then echo "secret=readable"; else echo "secret=denied"; fi
echo "--- bootstrap"
cat "$2"
`
	return testutil.WriteScript(t, "envoy", script)
}

// runSidecarProcess runs `connect sidecar` in a process of its own (this
// test binary, see TestMain) from the task dir, as the task driver does.
func runSidecarProcess(t *testing.T, l sidecarLayout, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"connect", "sidecar", "-proxy-id", l.proxyID, "-service", "web",
		"-grpc-addr", "unix://" + l.sock, "-bootstrap-path", l.bootstrap}, args...)...)
	cmd.Dir = l.taskDir
	cmd.Env = append(os.Environ(), runCLIEnv+"=1", "FAKE_ENVOY_SECRET="+l.bootstrap)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// handedBootstrap parses the bootstrap the fake envoy printed and returns
// it with the rest of its report.
func handedBootstrap(t *testing.T, stdout string) (report string, b *bootstrapv3.Bootstrap) {
	t.Helper()
	report, js, ok := strings.Cut(stdout, "--- bootstrap\n")
	if !ok {
		t.Fatalf("fake envoy did not run to the end:\n%s", stdout)
	}
	b = &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal([]byte(js), b); err != nil {
		t.Fatalf("handed bootstrap does not parse: %v\n%s", err, js)
	}
	return report, b
}

func localAgentPath(b *bootstrapv3.Bootstrap) string {
	return b.GetStaticResources().GetClusters()[0].GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetPipe().GetPath()
}

// TestSidecarEnvoyDropsPrivileges: started as root, `connect sidecar`
// runs Envoy as the proxy user with no capabilities and no_new_privs, as
// the built-in proxy runs. Envoy cannot read the bootstrap file (root's,
// in a closed dir) but gets it in memory, its socket relative to the
// socket's directory (the data dir above is closed to the proxy user);
// arguments after -- follow Envoy's own, replacing the default log level
// they set (Envoy refuses an option given twice). The file on disk is untouched.
func TestSidecarEnvoyDropsPrivileges(t *testing.T) {
	testutil.RequireRoot(t)
	nobody, err := user.Lookup(connect.ProxyUser)
	if err != nil {
		t.Skipf("no %s user on this host: %v", connect.ProxyUser, err)
	}
	l := newSidecarLayout(t)
	bin := fakeEnvoy(t)
	stdout, stderr, err := runSidecarProcess(t, l, "-mode", "envoy", "-envoy-binary", bin, "--", "--log-level", "debug")
	if err != nil {
		t.Fatalf("connect sidecar: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	report, b := handedBootstrap(t, stdout)
	t.Logf("fake envoy's report:\n%s", report)
	wants := []string{
		fmt.Sprintf("\nuid=%s gid=%s groups=%s\n", nobody.Uid, nobody.Gid, nobody.Gid),
		"\nCapInh:\t0000000000000000\n", "\nCapPrm:\t0000000000000000\n", "\nCapEff:\t0000000000000000\n",
		"\nCapAmb:\t0000000000000000\n", "\nNoNewPrivs:\t1\n",
		"\ncwd=" + l.runDir + "\n", "\nsecret=denied\n",
	}
	for _, want := range wants {
		if !strings.Contains(report, want) {
			t.Errorf("fake envoy's report lacks %q", want)
		}
	}
	args := regexp.MustCompile(`(?m)^args=-c /dev/fd/\d+ --concurrency 1 --disable-hot-restart --log-level debug$`)
	if !args.MatchString(report) {
		t.Errorf("envoy's arguments are not the in-memory bootstrap, the defaults and the pass-through ones")
	}
	if b.GetNode().GetId() != l.proxyID || localAgentPath(b) != connect.SocketName {
		t.Errorf("handed bootstrap: node %q, local_agent pipe %q; want %q, %q", b.GetNode().GetId(), localAgentPath(b), l.proxyID, connect.SocketName)
	}
	st, err := os.Stat(l.bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	if js, _ := os.ReadFile(l.bootstrap); st.Mode().Perm() != 0o600 || st.Sys().(*syscall.Stat_t).Uid != 0 || !bytes.Equal(js, l.js) {
		t.Errorf("bootstrap file changed: mode %v uid %d", st.Mode(), st.Sys().(*syscall.Stat_t).Uid)
	}
}

// TestSidecarEnvoyWithoutProxyUser: a host without the proxy user keeps
// running Envoy as root with the bootstrap file's own path (warned), as the
// built-in proxy does; but extra Envoy arguments are then refused.
func TestSidecarEnvoyWithoutProxyUser(t *testing.T) {
	testutil.RequireRoot(t)
	l := newSidecarLayout(t)
	bin := fakeEnvoy(t)
	const missing = "meshlet-no-such-user"
	stdout, stderr, err := runSidecarProcess(t, l, "-mode", "envoy", "-envoy-binary", bin, "-user", missing)
	if err != nil {
		t.Fatalf("connect sidecar: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	report, b := handedBootstrap(t, stdout)
	if !strings.Contains(stderr, "==> envoy: not dropping privileges") || !strings.Contains(report, "\nuid=0 ") ||
		!strings.Contains(report, "\nargs=-c "+l.bootstrap+" -l info") || !strings.Contains(report, "\ncwd="+l.taskDir+"\n") ||
		localAgentPath(b) != l.sock {
		t.Errorf("report:\n%s\nstderr:\n%s", report, stderr)
	}

	stdout, stderr, err = runSidecarProcess(t, l, "-mode", "envoy", "-envoy-binary", bin, "-user", missing, "--", "--log-path", "/etc/x")
	if err == nil || !strings.Contains(stderr, errEnvoyArgsAsRoot.Error()) || strings.Contains(stdout, "uid=") {
		t.Errorf("extra Envoy arguments as root: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
}
