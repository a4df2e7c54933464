package proc

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/internal/isolate"
)

func TestParseTaskConfig(t *testing.T) {
	tests := []struct {
		name     string
		in       map[string]any
		raw      bool // parse as raw_exec (not isolated)
		wantArgs []string
		want     *taskConfig // checked when set (Command and Args aside)
		wantErr  string
	}{
		{name: "command only", in: map[string]any{"command": "sleep"}},
		{name: "string args", in: map[string]any{"command": "x", "args": []string{"a", "b"}}, wantArgs: []string{"a", "b"}},
		{name: "mixed args", in: map[string]any{"command": "x", "args": []any{"-p", 8080.0, 3, int64(4), json.Number("5"), true, 1.5}},
			wantArgs: []string{"-p", "8080", "3", "4", "5", "true", "1.5"}},
		{name: "ignored keys", in: map[string]any{"command": "x", "work_dir": "/w"}},
		{name: "raw_exec ignores exec keys", raw: true, in: map[string]any{"command": "x", "pid_mode": "nope", "cap_add": 3},
			want: &taskConfig{}},
		{name: "exec keys", in: map[string]any{"command": "x", "cap_add": []any{"net_raw"}, "cap_drop": []string{"ALL"},
			"pid_mode": "host", "ipc_mode": "private"},
			want: &taskConfig{CapAdd: []string{"net_raw"}, CapDrop: []string{"ALL"}, PIDMode: "host", IPCMode: "private"}},
		{name: "bad pid_mode", in: map[string]any{"command": "x", "pid_mode": "shared"}, wantErr: `pid_mode must be "private" or "host", got "shared"`},
		{name: "bad ipc_mode type", in: map[string]any{"command": "x", "ipc_mode": true}, wantErr: "ipc_mode must be a string, got bool"},
		{name: "scalar cap_add", in: map[string]any{"command": "x", "cap_add": "net_raw"}, wantErr: "cap_add must be a list of strings"},
		{name: "non-string cap_drop", in: map[string]any{"command": "x", "cap_drop": []any{"kill", 3.0}}, wantErr: "cap_drop[1] must be a string"},
		{name: "missing command", in: map[string]any{"args": []any{"a"}}, wantErr: "command is required"},
		{name: "nil config", in: nil, wantErr: "command is required"},
		{name: "empty command", in: map[string]any{"command": ""}, wantErr: "non-empty string"},
		{name: "list command", in: map[string]any{"command": []any{"x"}}, wantErr: "non-empty string"},
		{name: "scalar args", in: map[string]any{"command": "x", "args": 3}, wantErr: "args must be a list"},
		{name: "nested arg", in: map[string]any{"command": "x", "args": []any{"a", []any{}}}, wantErr: "args[1]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTaskConfig(tc.in, !tc.raw)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %+v, %v; want error %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got.Args, tc.wantArgs) {
				t.Fatalf("got %+v, %v; want args %q", got, err, tc.wantArgs)
			}
			if w := tc.want; w != nil && (!slices.Equal(got.CapAdd, w.CapAdd) || !slices.Equal(got.CapDrop, w.CapDrop) ||
				got.PIDMode != w.PIDMode || got.IPCMode != w.IPCMode) {
				t.Fatalf("got %+v, want %+v", got, w)
			}
		})
	}
}

// TestPlanIsolation: the driver's allow_caps and default modes meet the
// task's config.
func TestPlanIsolation(t *testing.T) {
	d := New(Options{Name: "exec", Isolate: true, AllowCaps: append(isolate.DefaultCaps(), "net_raw"), DefaultIPCMode: ModeHost}, nil)
	iso, err := d.planIsolation(&taskConfig{CapAdd: []string{"NET_RAW"}, PIDMode: ModeHost})
	if err != nil || !iso.caps.Has(unix.CAP_NET_RAW) || iso.added != 1<<unix.CAP_NET_RAW || !iso.hostPID || !iso.hostIPC {
		t.Fatalf("plan %+v, %v", iso, err)
	}
	iso, err = d.planIsolation(&taskConfig{CapDrop: []string{"all"}, IPCMode: ModePrivate})
	if err != nil || iso.caps != 0 || iso.hostPID || iso.hostIPC {
		t.Fatalf("drop all: %+v, %v", iso, err)
	}
	if _, err := d.planIsolation(&taskConfig{CapAdd: []string{"sys_admin"}}); !errors.Is(err, isolate.ErrCapNotAllowed) ||
		!strings.Contains(err.Error(), "driver does not allow the following capabilities: sys_admin") {
		t.Fatalf("sys_admin: %v", err)
	}
	plain := New(Options{Name: "exec", Isolate: true}, nil)
	if iso, err := plain.planIsolation(&taskConfig{}); err != nil || iso.caps.String() != strings.Join(isolate.DefaultCaps(), ", ") {
		t.Fatalf("defaults: %+v, %v", iso, err)
	}
}

func TestDecodeState(t *testing.T) {
	good := driverState{Version: 1, ExecutorPID: 10, TaskPID: 11, ExitFile: "/x/exit.json", StateDir: "/x"}
	b, _ := json.Marshal(good)
	if st, err := decodeState(b); err != nil || st.TaskPID != 11 {
		t.Fatalf("decode: %+v, %v", st, err)
	}
	v2 := good
	v2.Version = 2
	b2, _ := json.Marshal(v2)
	if _, err := decodeState(b2); !errors.Is(err, driver.ErrHandleVersion) {
		t.Fatalf("v2: %v", err)
	}
	if _, err := decodeState([]byte(`{"version":1,"task_pid":1}`)); err == nil {
		t.Fatal("incomplete state accepted")
	}
	// An empty capability set (cap_drop = ["all"]) survives the round
	// trip as empty, not as "recorded before tasks had their own set".
	dropped := good
	dropped.Caps = []string{}
	b3, _ := json.Marshal(dropped)
	if st, err := decodeState(b3); err != nil || st.Caps == nil || len(st.Caps) != 0 {
		t.Fatalf("empty caps: %#v, %v", st, err)
	}
	if st, _ := decodeState(b); st.Caps != nil {
		t.Fatalf("a payload without caps: %#v", st.Caps)
	}
}

func TestTaskStore(t *testing.T) {
	s := newTaskStore()
	if err := s.reserve("a"); err != nil {
		t.Fatal(err)
	}
	if s.get("a") != nil {
		t.Fatal("a reservation is not a task")
	}
	if err := s.reserve("a"); !errors.Is(err, driver.ErrTaskExists) {
		t.Fatalf("double reserve: %v", err)
	}
	h := newHandle(&driver.TaskConfig{ID: "a"}, &driverState{})
	s.set("a", h)
	if s.get("a") != h {
		t.Fatal("set/get mismatch")
	}
	s.delete("a")
	if s.get("a") != nil || s.reserve("a") != nil {
		t.Fatal("delete did not free the ID")
	}
}
