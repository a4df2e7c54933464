package executor

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func validSpec(dir string) *Spec {
	return &Spec{
		TaskID: "a/web/1", Command: "/bin/true", Dir: dir,
		StdoutPath: filepath.Join(dir, "web.stdout"), StderrPath: filepath.Join(dir, "web.stderr"),
		LogMaxFiles: 2, LogMaxFileSize: 1024, ExitFile: filepath.Join(dir, "exit.json"),
	}
}

func TestSpecValidate(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name   string
		mutate func(*Spec)
		want   string
	}{
		{"valid", func(*Spec) {}, ""},
		{"no id", func(s *Spec) { s.TaskID = "" }, "task_id"},
		{"relative command", func(s *Spec) { s.Command = "true" }, "absolute"},
		{"no dir", func(s *Spec) { s.Dir = "" }, "dir"},
		{"no logs", func(s *Spec) { s.StdoutPath = "" }, "stdout_path"},
		{"no rotation", func(s *Spec) { s.LogMaxFiles = 0 }, "log_max_files"},
		{"no exit file", func(s *Spec) { s.ExitFile = "" }, "exit_file"},
		{"isolated relative command", func(s *Spec) {
			s.Command, s.Isolation = "sh", &IsolationSpec{StageCmd: []string{"/usr/bin/meshlet", "executor"}}
		}, ""},
		{"isolated no command", func(s *Spec) {
			s.Command, s.Isolation = "", &IsolationSpec{StageCmd: []string{"/usr/bin/meshlet"}}
		}, "command is required"},
		{"isolated relative stage", func(s *Spec) {
			s.Command, s.Isolation = "sh", &IsolationSpec{StageCmd: []string{"meshlet"}}
		}, "stage_cmd"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec(dir)
			tc.mutate(s)
			err := s.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}

func TestSpecFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "spec.json")
	want := validSpec(dir)
	want.Env = map[string]string{"SECRET": "x"}
	if err := WriteSpec(path, want); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("spec file mode %v, %v", st, err)
	}
	got, err := readSpec(path)
	if err != nil || got.Env["SECRET"] != "x" || got.TaskID != want.TaskID {
		t.Fatalf("readSpec: %+v, %v", got, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("spec file (with the task's env) not deleted after reading")
	}
}

func TestExitStatusFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "exit.json")
	if _, err := ReadExitStatus(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	want := &ExitStatus{ExitCode: 137, Signal: 9, OOMKilled: true, ExitedAt: time.Now().UTC().Round(0)}
	if err := writeExitStatus(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadExitStatus(path)
	if err != nil || got.ExitCode != 137 || got.Signal != 9 || !got.OOMKilled || !got.ExitedAt.Equal(want.ExitedAt) {
		t.Fatalf("got %+v, %v", got, err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Fatalf("temp files left: %v", entries)
	}
}

func TestMainUsage(t *testing.T) {
	if code := Main([]string{"-bogus"}); code != 2 {
		t.Fatalf("bad flag: exit %d", code)
	}
	if code := Main(nil); code != 2 {
		t.Fatalf("no spec: exit %d", code)
	}
}

// TestMainBadSpec: a spec that cannot be read is reported on the status fd.
func TestMainBadSpec(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Main closes the status fd: hand it a duplicate of ours.
	fd, err := syscall.Dup(int(w.Fd()))
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	code := Main([]string{"-spec", filepath.Join(t.TempDir(), "missing.json"), "-status-fd", strconv.Itoa(fd)})
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	b := make([]byte, 512)
	n, _ := r.Read(b)
	if !strings.Contains(string(b[:n]), "failed to read executor spec") {
		t.Fatalf("status %q", b[:n])
	}
}
