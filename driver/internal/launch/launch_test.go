package launch

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"tool": 0o755, "data": 0o644} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		command string
		env     map[string]string
		want    string
		wantErr string
	}{
		{"absolute", filepath.Join(bin, "tool"), nil, filepath.Join(bin, "tool"), ""},
		{"relative to task dir", "bin/tool", nil, filepath.Join(bin, "tool"), ""},
		{"task PATH", "tool", map[string]string{"PATH": bin}, filepath.Join(bin, "tool"), ""},
		{"default PATH", "sh", nil, "", ""},
		{"not in task PATH", "sh", map[string]string{"PATH": bin}, "", "executable file not found"},
		{"missing absolute", "/nope", nil, "", `exec: "/nope": stat /nope: no such file or directory`},
		{"not executable", "bin/data", nil, "", "permission denied"},
		{"directory", "bin", map[string]string{"PATH": dir}, "", "not found"},
		{"empty", "", nil, "", "command is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LookPath(tc.command, tc.env, dir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("LookPath(%q) = %q, %v; want error %q", tc.command, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || (tc.want != "" && got != tc.want) || !filepath.IsAbs(got) {
				t.Fatalf("LookPath(%q) = %q, %v; want %q", tc.command, got, err, tc.want)
			}
		})
	}
	if _, err := LookPath("sh", map[string]string{"PATH": bin}, dir); !errors.Is(err, exec.ErrNotFound) {
		t.Fatalf("not found error %v does not wrap exec.ErrNotFound", err)
	}
}

func TestParseSignal(t *testing.T) {
	tests := []struct {
		in      string
		want    syscall.Signal
		wantErr bool
	}{
		{"", syscall.SIGINT, false},
		{"SIGTERM", syscall.SIGTERM, false},
		{"hup", syscall.SIGHUP, false},
		{"SigKill", syscall.SIGKILL, false},
		{"10", syscall.Signal(10), false},
		{"SIGNOPE", 0, true},
		{"0", 0, true},
		{"99", 0, true},
	}
	for _, tc := range tests {
		got, err := ParseSignal(tc.in, syscall.SIGINT)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseSignal(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestEnvListAndCredential(t *testing.T) {
	got := EnvList(map[string]string{"B": "2", "A": "1=x"})
	if !slices.Equal(got, []string{"A=1=x", "B=2"}) {
		t.Fatalf("EnvList = %v", got)
	}
	if c, err := Credential(""); c != nil || err != nil {
		t.Fatalf("empty user: %v, %v", c, err)
	}
	if _, err := Credential("no-such-user-meshlet"); err == nil {
		t.Fatal("unknown user accepted")
	}
}

func TestStartInNetNSBadPath(t *testing.T) {
	cmd := exec.Command("true")
	err := StartInNetNS(cmd, filepath.Join(t.TempDir(), "missing"))
	if err == nil || !strings.Contains(err.Error(), "failed to enter network namespace") {
		t.Fatalf("got %v", err)
	}
	if cmd.Process != nil {
		t.Fatal("command started despite the bad namespace")
	}
}
