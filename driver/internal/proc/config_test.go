package proc

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/driver"
)

func TestParseTaskConfig(t *testing.T) {
	tests := []struct {
		name     string
		in       map[string]any
		wantArgs []string
		wantErr  string
	}{
		{"command only", map[string]any{"command": "sleep"}, nil, ""},
		{"string args", map[string]any{"command": "x", "args": []string{"a", "b"}}, []string{"a", "b"}, ""},
		{"mixed args", map[string]any{"command": "x", "args": []any{"-p", 8080.0, 3, int64(4), json.Number("5"), true, 1.5}},
			[]string{"-p", "8080", "3", "4", "5", "true", "1.5"}, ""},
		{"ignored keys", map[string]any{"command": "x", "pid_mode": "host"}, nil, ""},
		{"missing command", map[string]any{"args": []any{"a"}}, nil, "command is required"},
		{"nil config", nil, nil, "command is required"},
		{"empty command", map[string]any{"command": ""}, nil, "non-empty string"},
		{"list command", map[string]any{"command": []any{"x"}}, nil, "non-empty string"},
		{"scalar args", map[string]any{"command": "x", "args": 3}, nil, "args must be a list"},
		{"nested arg", map[string]any{"command": "x", "args": []any{"a", []any{}}}, nil, "args[1]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTaskConfig(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %+v, %v; want error %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got.Args, tc.wantArgs) {
				t.Fatalf("got %+v, %v; want args %q", got, err, tc.wantArgs)
			}
		})
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
