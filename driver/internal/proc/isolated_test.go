package proc

import (
	"maps"
	"testing"

	"github.com/meshlet/meshlet/driver"
)

func TestIsolatedEnv(t *testing.T) {
	cfg := &driver.TaskConfig{TaskDir: "/data/alloc/a1/web", AllocDir: "/data/alloc/a1/alloc", Env: map[string]string{
		"NOMAD_TASK_DIR":    "/data/alloc/a1/web/local",
		"NOMAD_SECRETS_DIR": "/data/alloc/a1/web/secrets/",
		"NOMAD_ALLOC_DIR":   "/data/alloc/a1/alloc",
		"OTHER":             "/data/alloc/a1/web/local",
	}}
	want := map[string]string{"NOMAD_TASK_DIR": "/local", "NOMAD_SECRETS_DIR": "/secrets", "NOMAD_ALLOC_DIR": "/alloc", "OTHER": "/data/alloc/a1/web/local"}
	if got := isolatedEnv(cfg); !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	cfg.Env["NOMAD_TASK_DIR"] = "/custom"
	if got := isolatedEnv(cfg); got["NOMAD_TASK_DIR"] != "/custom" {
		t.Fatalf("a value the client did not derive was moved: %v", got)
	}
	if u := isolatedUser(cfg); u != "nobody" {
		t.Fatalf("default user %q", u)
	}
}
