// Package cgroups creates, joins, samples and removes the per-task cgroups
// of the exec driver, on either cgroup v2 (unified) or the v1 cpu and memory
// controllers, whichever the host offers. A task's group lives at
// "<hierarchy>/<parent>/<name>" (parent "meshlet" by default).
//
// Concurrency: functions are safe for concurrent use on different groups;
// Group.Enter moves the whole calling process and must not race with another
// Enter in the same process (the executor calls it once).
package cgroups

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Mode is the cgroup flavour in use.
type Mode string

// Modes.
const (
	ModeV1 Mode = "v1"
	ModeV2 Mode = "v2"
)

// ErrUnavailable is returned by Detect when cgroups cannot be used.
var ErrUnavailable = errors.New("cgroups unavailable")

// Limits are a task's resources, in Nomad units.
type Limits struct {
	CPUShares   int64 // MHz; v1 cpu.shares, v2 cpu.weight derived from it
	MemoryMB    int64 // reservation (soft limit when MemoryMaxMB is larger)
	MemoryMaxMB int64 // hard limit when larger than MemoryMB
}

// Hierarchy locates the cpu and memory controllers.
type Hierarchy struct {
	Mode Mode
	// CPURoot and MemoryRoot are the controllers' mount points (the same
	// directory on v2).
	CPURoot, MemoryRoot string
}

// Group is one task's cgroup(s). It is JSON-serialisable so the driver can
// keep it in its recovery state.
type Group struct {
	Mode   Mode   `json:"mode"`
	CPU    string `json:"cpu"`    // directory in the cpu hierarchy
	Memory string `json:"memory"` // directory in the memory hierarchy (== CPU on v2)
	// CPURoot and MemoryRoot are the hierarchies' mount points.
	CPURoot    string `json:"cpu_root"`
	MemoryRoot string `json:"memory_root"`
}

// Detect finds usable cpu and memory controllers, preferring v2 when it
// holds both. The error (wrapping ErrUnavailable) says why there are none.
func Detect() (*Hierarchy, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: managing cgroups requires root", ErrUnavailable)
	}
	return detect("/proc/self/mountinfo")
}

// detect is Detect reading the mount table at mountinfo.
func detect(mountinfo string) (*Hierarchy, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, fmt.Errorf("%w: failed to read mountinfo: %w", ErrUnavailable, err)
	}
	defer f.Close()
	h := &Hierarchy{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		mnt, fstype, opts, ok := parseMountinfo(sc.Text())
		if !ok {
			continue
		}
		switch fstype {
		case "cgroup2":
			if hasControllers(mnt, "cpu", "memory") {
				return &Hierarchy{Mode: ModeV2, CPURoot: mnt, MemoryRoot: mnt}, nil
			}
		case "cgroup":
			for _, o := range strings.Split(opts, ",") {
				switch o {
				case "cpu":
					h.CPURoot = mnt
				case "memory":
					h.MemoryRoot = mnt
				}
			}
		}
	}
	if h.CPURoot == "" || h.MemoryRoot == "" {
		return nil, fmt.Errorf("%w: no cgroup v2 hierarchy with cpu and memory, and no v1 cpu and memory controllers mounted", ErrUnavailable)
	}
	h.Mode = ModeV1
	return h, nil
}

// parseMountinfo returns a mountinfo line's mount point, fs type and super
// options.
func parseMountinfo(line string) (mnt, fstype, opts string, ok bool) {
	pre, post, found := strings.Cut(line, " - ")
	if !found {
		return "", "", "", false
	}
	a, b := strings.Fields(pre), strings.Fields(post)
	if len(a) < 5 || len(b) < 3 {
		return "", "", "", false
	}
	return a[4], b[0], b[2], true
}

func hasControllers(dir string, want ...string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return false
	}
	have := strings.Fields(string(b))
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}

// Create makes the group "<parent>/<name>" and applies the limits. On error
// nothing is left behind.
func (h *Hierarchy) Create(parent, name string, l Limits) (g *Group, err error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return nil, fmt.Errorf("failed to create cgroup: invalid name %q", name)
	}
	g = &Group{
		Mode:       h.Mode,
		CPU:        filepath.Join(h.CPURoot, parent, name),
		Memory:     filepath.Join(h.MemoryRoot, parent, name),
		CPURoot:    h.CPURoot,
		MemoryRoot: h.MemoryRoot,
	}
	defer func() {
		if err != nil {
			_ = g.Destroy()
		}
	}()
	if h.Mode == ModeV2 {
		if err := enableV2Controllers(h.CPURoot, parent); err != nil {
			return nil, err
		}
	}
	for _, dir := range g.dirs() {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return nil, fmt.Errorf("failed to create cgroup parent: %w", err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("failed to create cgroup %s: %w", dir, err)
		}
	}
	for file, val := range limitFiles(h.Mode, l) {
		dir := g.Memory
		if strings.HasPrefix(file, "cpu.") {
			dir = g.CPU
		}
		if err := writeFile(filepath.Join(dir, file), val); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// enableV2Controllers creates parent and delegates cpu and memory down to
// its children.
func enableV2Controllers(root, parent string) error {
	dir := root
	for _, elem := range strings.Split(filepath.Clean("/"+parent), "/") {
		if elem == "" {
			continue
		}
		if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+cpu +memory"); err != nil {
			return err
		}
		dir = filepath.Join(dir, elem)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("failed to create cgroup %s: %w", dir, err)
		}
	}
	return writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+cpu +memory")
}

// limitFiles maps Limits onto control files for the mode.
func limitFiles(mode Mode, l Limits) map[string]string {
	out := map[string]string{}
	hard, soft := l.MemoryMB, int64(0)
	if l.MemoryMaxMB > l.MemoryMB {
		hard, soft = l.MemoryMaxMB, l.MemoryMB
	}
	shares := min(max(l.CPUShares, 2), 262144)
	switch mode {
	case ModeV1:
		if l.CPUShares > 0 {
			out["cpu.shares"] = strconv.FormatInt(shares, 10)
		}
		if hard > 0 {
			out["memory.limit_in_bytes"] = strconv.FormatInt(hard<<20, 10)
		}
		if soft > 0 {
			out["memory.soft_limit_in_bytes"] = strconv.FormatInt(soft<<20, 10)
		}
	case ModeV2:
		if l.CPUShares > 0 {
			// The systemd/runc conversion of shares [2, 262144] onto
			// weight [1, 10000].
			out["cpu.weight"] = strconv.FormatInt(1+((shares-2)*9999)/262142, 10)
		}
		if hard > 0 {
			out["memory.max"] = strconv.FormatInt(hard<<20, 10)
		}
		if soft > 0 {
			out["memory.low"] = strconv.FormatInt(soft<<20, 10)
		}
	}
	return out
}

func (g *Group) dirs() []string {
	if g.CPU == g.Memory {
		return []string{g.CPU}
	}
	return []string{g.CPU, g.Memory}
}

// Enter moves the calling process into the group, so that a child forked
// now starts inside it with no window outside. restore moves the process
// back to the cgroups it was in.
func (g *Group) Enter() (restore func() error, err error) {
	orig, err := g.currentDirs()
	if err != nil {
		return nil, err
	}
	restore = func() error {
		var errs []error
		for _, dir := range orig {
			errs = append(errs, writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(os.Getpid())))
		}
		return errors.Join(errs...)
	}
	for _, dir := range g.dirs() {
		if err := writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
			_ = restore()
			return nil, err
		}
	}
	return restore, nil
}

// PrepareStart readies cmd to start inside the group, never running
// outside it: on v2 it is forked straight into it (CLONE_INTO_CGROUP); v1
// cannot, so cmd stops at its exec (ptrace) for Started, called on the
// OS thread that started it, to move it in before it runs. release
// closes what it opened; call it once cmd started or failed to.
func (g *Group) PrepareStart(cmd *exec.Cmd) (release func(), err error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if g.Mode != ModeV2 {
		cmd.SysProcAttr.Ptrace = true
		return func() {}, nil
	}
	fd, err := unix.Open(g.CPU, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("failed to open cgroup %s: %w", g.CPU, err)
	}
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	return func() { unix.Close(fd) }, nil
}

// si_code values of a stopped child (<asm-generic/siginfo.h>).
const cldTrapped, cldStopped = 4, 5

// Started completes PrepareStart once cmd (pid) started: on v1 it waits
// for the process to stop at its exec, moves it into the group and lets
// it run (detaching, so it must run on the OS thread that started it). A
// process that died meanwhile is left for its Wait. On error the process
// is killed, and still has to be reaped.
func (g *Group) Started(pid int) error {
	if g.Mode == ModeV2 {
		return nil
	}
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WEXITED|unix.WNOWAIT, nil)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EINTR) {
			_ = unix.Kill(pid, unix.SIGKILL)
			return fmt.Errorf("failed to wait for process %d to start: %w", pid, err)
		}
	}
	if info.Code != cldTrapped && info.Code != cldStopped {
		return nil // it died: its exit is its Wait's
	}
	_ = unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED, nil) // consume the stop
	var errs []error
	for _, dir := range g.dirs() {
		errs = append(errs, writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)))
	}
	if err := errors.Join(errs...); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		_ = unix.PtraceDetach(pid)
		return err
	}
	if err := unix.PtraceDetach(pid); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return fmt.Errorf("failed to resume process %d: %w", pid, err)
	}
	return nil
}

// currentDirs returns the directories of the calling process's own cpu and
// memory cgroups in the group's hierarchies.
func (g *Group) currentDirs() ([]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("failed to read own cgroup: %w", err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			switch {
			case g.Mode == ModeV2 && parts[0] == "0" && parts[1] == "":
				out = append(out, filepath.Join(g.CPURoot, parts[2]))
			case g.Mode == ModeV1 && c == "cpu":
				out = append(out, filepath.Join(g.CPURoot, parts[2]))
			case g.Mode == ModeV1 && c == "memory":
				out = append(out, filepath.Join(g.MemoryRoot, parts[2]))
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("failed to find own cgroup in /proc/self/cgroup")
	}
	return out, nil
}

// Destroy kills whatever is left in the group and removes it. A group that
// does not exist is already destroyed.
func (g *Group) Destroy() error {
	var errs []error
	for _, dir := range g.dirs() {
		errs = append(errs, removeDir(dir))
	}
	return errors.Join(errs...)
}

func removeDir(dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("failed to remove cgroup %s: %w", dir, err)
		}
		pids, _ := readPIDs(dir)
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PIDs lists the processes in the group.
func (g *Group) PIDs() ([]int, error) { return readPIDs(g.Memory) }

func readPIDs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("failed to read cgroup processes: %w", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// MemoryUsage returns the group's current memory use in bytes.
func (g *Group) MemoryUsage() (uint64, error) {
	file := "memory.usage_in_bytes"
	if g.Mode == ModeV2 {
		file = "memory.current"
	}
	b, err := os.ReadFile(filepath.Join(g.Memory, file))
	if err != nil {
		return 0, fmt.Errorf("failed to read cgroup memory usage: %w", err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("failed to parse cgroup memory usage: %w", err)
	}
	return v, nil
}

// OOMKilled reports whether the kernel's OOM killer killed a process in the
// group (the oom_kill counter, kernels >= 4.13).
func (g *Group) OOMKilled() bool {
	file := "memory.oom_control"
	if g.Mode == ModeV2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(g.Memory, file))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			return f[1] != "0"
		}
	}
	return false
}

func writeFile(path, val string) error {
	if err := os.WriteFile(path, []byte(val), 0o644); err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	return nil
}
