package command

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/consulapi"
)

// newConfigAPI serves the real Consul-shaped API over an in-memory
// config entry registry and points MESHLET_CONNECT_ADDR at it.
func newConfigAPI(t *testing.T) *configentry.Registry {
	t.Helper()
	reg := configentry.NewRegistry()
	srv := consulapi.NewServer(consulapi.Deps{Catalog: catalog.New(), ConfigEntries: reg}, hclog.NewNullLogger())
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	t.Setenv("MESHLET_CONNECT_ADDR", hs.URL)
	return reg
}

// TestConfigCommands walks the config commands through a scripted
// session; each step depends on the ones before.
func TestConfigCommands(t *testing.T) {
	reg := newConfigAPI(t)
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	web := file("web.json", `{"Kind": "service-defaults", "Name": "web", "Protocol": "http"}`)
	api := file("api.json", `{"kind": "service-defaults", "name": "api", "protocol": "grpc"}`)
	webTCP := file("web-tcp.json", `{"Kind": "service-defaults", "Name": "web", "Protocol": "tcp"}`)
	broken := file("broken.json", `{"Kind": "service-defaults",`)
	unknown := file("unknown.json", `{"Kind": "service-nope", "Name": "x"}`)
	steps := []struct {
		args     []string
		wantCode int
		stdout   string // regexp
		stderr   string // substring
	}{
		{[]string{"config", "list", "-kind", "service-defaults"}, 0, `^$`, ""},
		{[]string{"config", "write", web}, 0, `^Config entry written: service-defaults/web\n$`, ""},
		{[]string{"config", "write", api}, 0, `^Config entry written: service-defaults/api\n$`, ""},
		{[]string{"config", "list", "-kind", "service-defaults"}, 0, `^api\nweb\n$`, ""},
		{[]string{"config", "read", "-kind", "service-defaults", "-name", "web"}, 0,
			`(?s)^\{\n  "Kind": "service-defaults",\n  "Name": "web",\n.*"Protocol": "http",\n.*\}\n$`, ""},
		{[]string{"config", "write", "-cas", "-modify-index", "0", webTCP}, 1, `^$`, "Error: config entry service-defaults/web was not written: its modify index is not 0"},
		{[]string{"config", "write", broken}, 1, `^$`, "Error: "},
		{[]string{"config", "write", unknown}, 1, `^$`, "Error: "},
		{[]string{"config", "write", filepath.Join(dir, "missing.json")}, 1, `^$`, "Error: failed to read config entry file"},
		{[]string{"config", "write"}, 1, `^$`, "Error: expected one argument: FILE"},
		{[]string{"config", "read", "-kind", "service-defaults"}, 1, `^$`, "Error: -name is required"},
		{[]string{"config", "list"}, 1, `^$`, "Error: -kind is required"},
		{[]string{"config", "list", "-kind", "service-nope"}, 1, `^$`, `Error: unknown config entry kind "service-nope"`},
		{[]string{"config", "read", "-kind", "service-defaults", "-name", "web"}, 0, `"Protocol": "http"`, ""},
		{[]string{"config", "delete", "-kind", "service-defaults", "-name", "web"}, 0, `^Config entry deleted: service-defaults/web\n$`, ""},
		{[]string{"config", "read", "-kind", "service-defaults", "-name", "web"}, 1, `^$`, "Error: config entry service-defaults/web not found"},
		{[]string{"config", "list", "-kind", "service-defaults"}, 0, `^api\n$`, ""},
	}
	for _, st := range steps {
		r := runCLI(t, "", st.args...)
		if r.code != st.wantCode || !regexp.MustCompile(st.stdout).MatchString(r.stdout) || !strings.Contains(r.stderr, st.stderr) {
			t.Fatalf("%v: exit %d stdout %q stderr %q; want %d, /%s/, %q", st.args, r.code, r.stdout, r.stderr, st.wantCode, st.stdout, st.stderr)
		}
		if st.wantCode != 0 && strings.Count(r.stderr, "Error:") != 1 {
			t.Fatalf("%v: stderr %q; want one error line", st.args, r.stderr)
		}
	}
	set, _ := reg.Current()
	if set.Len() != 1 || set.Get("service-defaults", "api") == nil {
		t.Fatalf("registry after the session = %v", set.List(""))
	}
	// A file on stdin.
	if r := runCLI(t, `{"Kind":"proxy-defaults","Name":"global","Config":{"protocol":"http"}}`, "config", "write", "-"); r.code != 0 ||
		r.stdout != "Config entry written: proxy-defaults/global\n" {
		t.Fatalf("write from stdin: %+v", r)
	}
}

func TestConfigUnreachable(t *testing.T) {
	t.Setenv("MESHLET_CONNECT_ADDR", "http://127.0.0.1:1")
	for _, args := range [][]string{
		{"config", "list", "-kind", "service-router"},
		{"config", "read", "-kind", "service-router", "-name", "web"},
		{"config", "delete", "-kind", "service-router", "-name", "web"},
	} {
		r := runCLI(t, "", args...)
		if r.code != 1 || !strings.Contains(r.stderr, "cannot reach the connect API at http://127.0.0.1:1") || strings.Count(r.stderr, "\n") != 1 {
			t.Fatalf("%v: exit %d stderr %q", args, r.code, r.stderr)
		}
	}
}
