package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Machine is the facts of the machine a run measured.
type Machine struct {
	Date      string `json:"date"`
	Cores     int    `json:"cores"`
	CPUModel  string `json:"cpu_model"`
	Memory    string `json:"memory"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	Commit    string `json:"commit"`
	LoadGen   string `json:"load_generators"`
}

// DescribeMachine gathers the facts: cores, CPU model and memory from
// /proc, the kernel release, the Go toolchain and the repository's commit.
func DescribeMachine(ctx context.Context, goBin, repo string) Machine {
	m := Machine{Date: time.Now().UTC().Format("2006-01-02 15:04 MST"), Cores: runtime.NumCPU()}
	m.CPUModel = procField("/proc/cpuinfo", "model name")
	if kb := procField("/proc/meminfo", "MemTotal"); kb != "" {
		var n int64
		if _, err := fmt.Sscanf(kb, "%d kB", &n); err == nil {
			m.Memory = fmt.Sprintf("%.1f GiB", float64(n)/(1<<20))
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.GoVersion = output(ctx, repo, goBin, "env", "GOVERSION")
	m.Commit = output(ctx, repo, "git", "rev-parse", "--short", "HEAD")
	if dirty := output(ctx, repo, "git", "status", "--porcelain", "--untracked-files=no"); dirty != "" {
		m.Commit += " (with uncommitted changes)"
	}
	return m
}

// procField returns the value of the first "key : value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// output runs a command and returns its trimmed stdout ("" on error).
func output(ctx context.Context, dir, name string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
