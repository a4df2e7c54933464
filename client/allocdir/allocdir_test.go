package allocdir

import (
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/meshlet/meshlet/internal/testutil"
)

func TestBuildLayoutAndModes(t *testing.T) {
	root := t.TempDir()
	d := New(root, "a1")
	if d.Exists() {
		t.Fatal("exists before Build")
	}
	for i := 0; i < 2; i++ { // idempotent
		if err := d.Build([]string{"web", "connect-proxy-web"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]os.FileMode{
		"a1/alloc":                     0o755,
		"a1/alloc/logs":                0o755,
		"a1/alloc/data":                0o755,
		"a1/alloc/tmp":                 0o777 | os.ModeSticky,
		"a1/alloc/run":                 0o755,
		"a1/web/local":                 0o755,
		"a1/web/secrets":               0o700,
		"a1/web/tmp":                   0o777 | os.ModeSticky,
		"a1/connect-proxy-web/secrets": 0o700,
	}
	for rel, mode := range want {
		fi, err := os.Stat(filepath.Join(root, rel))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if got := fi.Mode() & (os.ModePerm | os.ModeSticky); got != mode {
			t.Errorf("%s mode = %v, want %v", rel, got, mode)
		}
	}
	td := d.TaskDir("web")
	if td.LocalDir != filepath.Join(root, "a1", "web", "local") || td.LogDir != d.LogDir {
		t.Errorf("task dir = %+v", td)
	}
	if err := d.Destroy(); err != nil || d.Exists() {
		t.Fatalf("Destroy: %v", err)
	}
	if err := d.Destroy(); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
}

func TestBuildRejectsBadTaskNames(t *testing.T) {
	for _, name := range []string{"", "alloc", "..", "a/b"} {
		d := New(t.TempDir(), "a1")
		if err := d.Build([]string{name}, nil); err == nil {
			t.Errorf("task name %q accepted", name)
		}
	}
}

// TestBuildChownsTaskDirsToTaskUser: a task with a user owns its task dir,
// local/, secrets/ and tmp/; the shared tree and userless tasks stay root's.
func TestBuildChownsTaskDirsToTaskUser(t *testing.T) {
	testutil.RequireRoot(t)
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody on this machine: %v", err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	d := New(t.TempDir(), "a1")
	for range 2 { // a restart builds again: owners stay
		if err := d.Build([]string{"web", "sidecar"}, map[string]string{"web": "nobody"}); err != nil {
			t.Fatal(err)
		}
	}
	web, side := d.TaskDir("web"), d.TaskDir("sidecar")
	want := map[string]int{web.Dir: uid, web.LocalDir: uid, web.SecretsDir: uid, web.TmpDir: uid,
		side.Dir: 0, side.LocalDir: 0, side.SecretsDir: 0, d.SharedDir: 0, d.RunDir: 0, d.LogDir: 0}
	for p, wantUID := range want {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		wantGID := 0
		if wantUID == uid {
			wantGID = gid
		}
		if int(st.Uid) != wantUID || int(st.Gid) != wantGID {
			t.Errorf("%s owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, wantUID, wantGID)
		}
	}
	if fi, _ := os.Stat(web.SecretsDir); fi.Mode().Perm() != 0o700 {
		t.Errorf("secrets mode = %v, want 0700", fi.Mode().Perm())
	}
}

func TestBuildRejectsUnknownUser(t *testing.T) {
	d := New(t.TempDir(), "a1")
	err := d.Build([]string{"web"}, map[string]string{"web": "no-such-user-meshlet"})
	if !errors.Is(err, ErrUnknownUser) {
		t.Fatalf("err = %v, want ErrUnknownUser", err)
	}
	if d.Exists() {
		t.Error("Build created the tree before failing on the user")
	}
}

// TestBuildDoesNotFollowPlantedSymlinks: a task that owns its task dir
// replaces local/ and secrets/ with links to a victim directory; the next
// Build (an agent restart) must neither chmod nor chown the victim.
func TestBuildDoesNotFollowPlantedSymlinks(t *testing.T) {
	root := t.TempDir()
	victim := filepath.Join(root, "victim")
	if err := os.Mkdir(victim, 0o751); err != nil {
		t.Fatal(err)
	}
	d := New(filepath.Join(root, "alloc"), "a1")
	if err := d.Build([]string{"web"}, nil); err != nil {
		t.Fatal(err)
	}
	td := d.TaskDir("web")
	for _, p := range []string{td.LocalDir, td.SecretsDir, d.RunDir} {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Build([]string{"web"}, nil); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(victim); err != nil || fi.Mode().Perm() != 0o751 {
		t.Fatalf("victim changed: %v %v", fi.Mode(), err)
	}
	for _, p := range []string{td.LocalDir, td.SecretsDir, d.RunDir} {
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			t.Errorf("%s is not a directory again: %v", p, err)
		}
	}
}

// TestWriteSecretOwnedByTaskUserAndNoFollow: the secret belongs to the task
// user (0600) and a link planted at its name is replaced, not followed.
func TestWriteSecretOwnedByTaskUserAndNoFollow(t *testing.T) {
	testutil.RequireRoot(t)
	uid, gid, err := LookupUser("nobody")
	if err != nil {
		t.Skip(err)
	}
	root := t.TempDir()
	victim := filepath.Join(root, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := New(filepath.Join(root, "alloc"), "a1")
	if err := d.Build([]string{"proxy"}, map[string]string{"proxy": "nobody"}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(d.TaskDir("proxy").SecretsDir, "envoy_bootstrap.json")
	if err := os.Symlink(victim, p); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteSecret("proxy", "envoy_bootstrap.json", "nobody", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("followed the planted link: victim = %q", b)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || int(st.Uid) != uid || int(st.Gid) != gid {
		t.Fatalf("secret %v owned by %d:%d", fi.Mode(), st.Uid, st.Gid)
	}
}

// TestWriteSecretSecretsDirSwappedForLink: secrets/ sits in the task dir,
// which the task's user owns; a task that swaps secrets/ for a link to
// another directory must not make the agent delete or create files there.
func TestWriteSecretSecretsDirSwappedForLink(t *testing.T) {
	root := t.TempDir()
	elsewhere := filepath.Join(root, "elsewhere")
	if err := os.Mkdir(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(elsewhere, "envoy_bootstrap.json")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := New(filepath.Join(root, "alloc"), "a1")
	if err := d.Build([]string{"proxy"}, nil); err != nil {
		t.Fatal(err)
	}
	secrets := d.TaskDir("proxy").SecretsDir
	if err := os.Remove(secrets); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, secrets); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteSecret("proxy", "envoy_bootstrap.json", "", []byte("{}")); err == nil {
		t.Error("WriteSecret through a linked secrets dir succeeded")
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep" {
		t.Fatalf("the file behind the link changed: %q, %v", b, err)
	}
}
