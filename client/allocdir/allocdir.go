// Package allocdir owns an allocation's directory tree on the client, laid
// out like Nomad's:
//
//	<data_dir>/alloc/<alloc-id>/
//	  alloc/         shared by the group's tasks (NOMAD_ALLOC_DIR)
//	    logs/        <task>.stdout.N / <task>.stderr.N
//	    tmp/  data/
//	    run/         meshlet's sockets: root-owned 0755, so no task can
//	                 plant a file where the agent will listen
//	  <task>/        owned by the task's user, if it has one
//	    local/       NOMAD_TASK_DIR
//	    secrets/     NOMAD_SECRETS_DIR, mode 0700
//	    tmp/
//
// Build is idempotent (an agent restart calls it again) and never follows a
// symbolic link a task left where one of the tree's directories belongs:
// the link is removed and the directory made again. Destroy removes the
// tree. An AllocDir is plain data plus file-system calls: callers serialize
// Build and Destroy of the same allocation (the alloc runner does).
package allocdir

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/internal/nofollow"
)

// RunDirName is the shared directory holding meshlet's sockets.
const RunDirName = "run"

// AllocDir is one allocation's directory tree.
type AllocDir struct {
	// Dir is <root>/<alloc-id>.
	Dir string
	// SharedDir is Dir/alloc, LogDir Dir/alloc/logs, RunDir Dir/alloc/run.
	SharedDir string
	LogDir    string
	RunDir    string
}

// TaskDir is one task's directories.
type TaskDir struct {
	Dir        string
	LocalDir   string
	SecretsDir string
	TmpDir     string
	// LogDir is the allocation's shared log directory.
	LogDir string
}

// New returns the layout of allocID under root (<data_dir>/alloc); nothing
// is created until Build.
func New(root, allocID string) *AllocDir {
	dir := filepath.Join(root, allocID)
	shared := filepath.Join(dir, "alloc")
	return &AllocDir{Dir: dir, SharedDir: shared, LogDir: filepath.Join(shared, "logs"),
		RunDir: filepath.Join(shared, RunDirName)}
}

// TaskDir returns the layout of a task's directories.
func (d *AllocDir) TaskDir(task string) TaskDir {
	dir := filepath.Join(d.Dir, task)
	return TaskDir{Dir: dir, LocalDir: filepath.Join(dir, "local"), SecretsDir: filepath.Join(dir, "secrets"),
		TmpDir: filepath.Join(dir, "tmp"), LogDir: d.LogDir}
}

// dirs is the task's directories, the task dir first.
func (td TaskDir) dirs() []string { return []string{td.Dir, td.LocalDir, td.SecretsDir, td.TmpDir} }

func validTaskName(t string) error {
	if t == "" || t == "alloc" || t == "." || t == ".." || filepath.Base(t) != t {
		return fmt.Errorf("invalid task name %q", t)
	}
	return nil
}

// owner is a directory's owner; nil leaves the owner unchanged.
type owner struct{ uid, gid int }

// Build creates the shared directories and every task's directories. A
// task's directories (the task dir, local/, secrets/ and tmp/) belong to
// its user in users (task name → user name), as Nomad does, so a task
// running as that user can write its directories and read its secrets;
// everything else, and the directories of tasks without a user, belongs to
// the agent's user (root). Task names must be plain names (no path
// separators, not "alloc"); an unknown user fails before anything is made.
func (d *AllocDir) Build(tasks []string, users map[string]string) error {
	agent := &owner{os.Geteuid(), os.Getegid()}
	dirs := map[string]os.FileMode{
		d.Dir: 0o755, d.SharedDir: 0o755, d.LogDir: 0o755, d.RunDir: 0o755,
		filepath.Join(d.SharedDir, "tmp"): 0o777 | os.ModeSticky, filepath.Join(d.SharedDir, "data"): 0o755,
	}
	owners := map[string]*owner{}
	for _, t := range tasks {
		if err := validTaskName(t); err != nil {
			return fmt.Errorf("failed to build task directory: %w", err)
		}
		own := agent
		if name := users[t]; name != "" {
			uid, gid, err := LookupUser(name)
			if err != nil {
				return err
			}
			own = &owner{uid, gid}
		}
		td := d.TaskDir(t)
		dirs[td.Dir] = 0o755
		dirs[td.LocalDir] = 0o755
		dirs[td.SecretsDir] = 0o700
		dirs[td.TmpDir] = 0o777 | os.ModeSticky
		for _, p := range td.dirs() {
			owners[p] = own
		}
	}
	if err := os.MkdirAll(filepath.Dir(d.Dir), 0o755); err != nil {
		return fmt.Errorf("failed to create %s: %w", filepath.Dir(d.Dir), err)
	}
	for _, p := range slices.Sorted(maps.Keys(dirs)) { // parents sort before their children
		own := owners[p]
		if own == nil {
			own = agent
		}
		if err := ensureDir(p, dirs[p], own); err != nil {
			return err
		}
	}
	return nil
}

// ErrUnknownUser: a task's user does not exist on this node.
var ErrUnknownUser = errors.New("unknown user")

// LookupUser returns a task user's uid and gid.
func LookupUser(name string) (uid, gid int, err error) {
	u, err := user.Lookup(name)
	if err != nil {
		return 0, 0, fmt.Errorf("failed to look up task user %q: %w: %w", name, ErrUnknownUser, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("failed to parse the ids of task user %q: %w", name, err)
	}
	return uid, gid, nil
}

// WriteSecret writes a file into a task's secrets/ dir, mode 0600, owned by
// the task's user (userName; "" keeps the agent's user) so the task can read
// it. Whatever sits at the name (a link the task planted) is replaced,
// never followed; a secrets dir that is not a directory (swapped for a
// link) is an error.
func (d *AllocDir) WriteSecret(task, name, userName string, data []byte) error {
	if err := validTaskName(task); err != nil {
		return fmt.Errorf("failed to write secret: %w", err)
	}
	uid, gid := -1, -1
	if userName != "" {
		var err error
		if uid, gid, err = LookupUser(userName); err != nil {
			return err
		}
	}
	// secrets/ sits in the task dir, which the task's user owns: it is
	// opened without following a link and the file is made relative to
	// it, so a task that swaps it for a link cannot redirect the write.
	secrets := d.TaskDir(task).SecretsDir
	dir, err := nofollow.OpenDir(secrets)
	if err != nil {
		return fmt.Errorf("failed to open secrets dir: %w", err)
	}
	defer dir.Close()
	base := filepath.Base(name)
	p := filepath.Join(secrets, base)
	dfd := int(dir.Fd())
	if err := unix.Unlinkat(dfd, base, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("failed to replace %s: %w", p, err)
	}
	fd, err := unix.Openat(dfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("failed to create %s: %w", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	err = f.Chown(uid, gid)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, base, 0)
		return fmt.Errorf("failed to write %s: %w", p, err)
	}
	return nil
}

// ensureDir makes p a directory with mode and owner. Whatever else sits at
// p (a symbolic link or a file a task left there) is removed, never
// followed: owner and mode are set on the opened directory itself.
func ensureDir(p string, mode os.FileMode, own *owner) error {
	f, err := nofollow.OpenDir(p)
	if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENOTDIR) {
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("failed to remove %s (not a directory): %w", p, err)
		}
		f, err = nofollow.OpenDir(p)
	}
	if errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("failed to create %s: %w", p, err)
		}
		f, err = nofollow.OpenDir(p)
	}
	if err != nil {
		return fmt.Errorf("failed to open %s: %w", p, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return fmt.Errorf("failed to stat %s: %w", p, err)
	} else if st, ok := fi.Sys().(*syscall.Stat_t); own != nil && (!ok || int(st.Uid) != own.uid || int(st.Gid) != own.gid) {
		if err := f.Chown(own.uid, own.gid); err != nil {
			return fmt.Errorf("failed to set the owner of %s: %w", p, err)
		}
	}
	// Mkdir honours the umask and Chown may clear set-id bits; set the
	// intended mode last.
	if err := f.Chmod(mode); err != nil {
		return fmt.Errorf("failed to set mode of %s: %w", p, err)
	}
	return nil
}

// Destroy removes the allocation's tree; a missing tree is not an error.
func (d *AllocDir) Destroy() error {
	if err := os.RemoveAll(d.Dir); err != nil {
		return fmt.Errorf("failed to remove alloc dir %s: %w", d.Dir, err)
	}
	return nil
}

// Exists reports whether the tree was built.
func (d *AllocDir) Exists() bool {
	_, err := os.Stat(d.SharedDir)
	return err == nil
}

// maxSecretRead bounds ReadSecret.
const maxSecretRead = 64 << 10

// ReadSecret reads a file the agent wrote into a task's secrets/ dir with
// WriteSecret. Like WriteSecret it never follows a link the task planted
// (neither the secrets dir nor the file); a missing file is an error
// wrapping os.ErrNotExist. Files over 64 KiB are refused.
func (d *AllocDir) ReadSecret(task, name string) ([]byte, error) {
	if err := validTaskName(task); err != nil {
		return nil, fmt.Errorf("failed to read secret: %w", err)
	}
	secrets := d.TaskDir(task).SecretsDir
	dir, err := nofollow.OpenDir(secrets)
	if err != nil {
		return nil, fmt.Errorf("failed to open secrets dir: %w", err)
	}
	defer dir.Close()
	base := filepath.Base(name)
	p := filepath.Join(secrets, base)
	fd, err := unix.Openat(int(dir.Fd()), base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("failed to stat %s: %w", p, err)
	} else if !fi.Mode().IsRegular() || fi.Size() > maxSecretRead {
		return nil, fmt.Errorf("failed to read %s: not a regular file of at most %d bytes", p, maxSecretRead)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretRead+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", p, err)
	}
	return b, nil
}
