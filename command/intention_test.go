package command

import (
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/consulapi"
	"github.com/meshlet/meshlet/intention"
)

// newConnectAPI serves the real Consul-shaped API over an in-memory
// intention store (default allow, as in dev mode) and points
// MESHLET_CONNECT_ADDR at it.
func newConnectAPI(t *testing.T) *intention.Store {
	t.Helper()
	store, err := intention.New("", true, hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("failed to create intention store: %v", err)
	}
	srv := consulapi.NewServer(consulapi.Deps{Catalog: catalog.New(), Intentions: store}, hclog.NewNullLogger())
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	t.Setenv("MESHLET_CONNECT_ADDR", hs.URL)
	return store
}

// TestIntentions walks the intention commands through a scripted session;
// each step depends on the ones before.
func TestIntentions(t *testing.T) {
	newConnectAPI(t)
	steps := []struct {
		args     []string
		wantCode int
		stdout   string // regexp
		stderr   string // substring
	}{
		{[]string{"intention", "list"}, 0, `No intentions found\.`, ""},
		{[]string{"intention", "check", "web", "db"}, 0, `^Allowed\n$`, ""},
		{[]string{"intention", "create", "-deny", "web", "db"}, 0, `^Created: web => db \(deny\)\n$`, ""},
		{[]string{"intention", "check", "web", "db"}, 1, `^Denied\n$`, ""},
		{[]string{"intention", "create", "-allow", "web", "db"}, 1, `^$`, "Error: intention web => db already exists; use -replace"},
		{[]string{"intention", "check", "web", "db"}, 1, `^Denied\n$`, ""},
		{[]string{"intention", "create", "-allow", "-replace", "web", "db"}, 0, `^Replaced: web => db \(allow\)\n$`, ""},
		{[]string{"intention", "create", "-deny", "*", "db"}, 0, `Created: \* => db \(deny\)`, ""},
		{[]string{"intention", "check", "api", "db"}, 1, `^Denied\n$`, ""},
		{[]string{"intention", "check", "web", "db"}, 0, `^Allowed\n$`, ""},
		{[]string{"intention", "list"}, 0, `(?s)Source\s+Action\s+Destination\s+Precedence\n.*web\s+allow\s+db\s+9\n.*\*\s+deny\s+db\s+8`, ""},
		{[]string{"intention", "delete", "web", "db"}, 0, `^Intention deleted\.\n$`, ""},
		{[]string{"intention", "delete", "web", "db"}, 1, `^$`, "Error: intention web => db not found"},
		{[]string{"intention", "check", "web", "db"}, 1, `^Denied\n$`, ""},
		{[]string{"intention", "create", "web*", "db"}, 1, `^$`, "Error: failed to create intention web* => db"},
	}
	for _, st := range steps {
		r := runCLI(t, "", st.args...)
		if r.code != st.wantCode || !regexp.MustCompile(st.stdout).MatchString(r.stdout) || !strings.Contains(r.stderr, st.stderr) {
			t.Fatalf("%v: exit %d stdout %q stderr %q; want %d, /%s/, %q", st.args, r.code, r.stdout, r.stderr, st.wantCode, st.stdout, st.stderr)
		}
	}
}

func TestIntentionUnreachable(t *testing.T) {
	t.Setenv("MESHLET_CONNECT_ADDR", "http://127.0.0.1:1")
	tests := []struct {
		args     []string
		wantCode int
	}{
		{[]string{"intention", "check", "web", "db"}, 2},
		{[]string{"intention", "list"}, 1},
		{[]string{"intention", "create", "web", "db"}, 1},
	}
	for _, tc := range tests {
		r := runCLI(t, "", tc.args...)
		if r.code != tc.wantCode || !strings.Contains(r.stderr, "cannot reach the connect API at http://127.0.0.1:1") {
			t.Fatalf("%v: exit %d stderr %q", tc.args, r.code, r.stderr)
		}
	}
}

// TestIntentionNamespaces: SRC and DST take Consul's [partition/][ns/]name
// forms; meshlet has the default namespace only and says so.
func TestIntentionNamespaces(t *testing.T) {
	newConnectAPI(t)
	steps := []struct {
		args     []string
		wantCode int
		stdout   string // regexp
		stderr   string // substring
	}{
		{[]string{"intention", "create", "-deny", "default/web", "default/db"}, 0, `^Created: default/web => default/db \(deny\)\n$`, ""},
		{[]string{"intention", "check", "web", "db"}, 1, `^Denied\n$`, ""},
		{[]string{"intention", "check", "default/web", "default/default/db"}, 1, `^Denied\n$`, ""},
		{[]string{"intention", "create", "web", "db"}, 1, `^$`, "Error: intention web => db already exists; use -replace"},
		{[]string{"intention", "create", "-allow", "-replace", "default/default/web", "db"}, 0, `^Replaced: default/default/web => db \(allow\)\n$`, ""},
		{[]string{"intention", "list"}, 0, `(?s)Source\s+Action\s+Destination\s+Precedence\nweb\s+allow\s+db\s+9\n$`, ""},
		{[]string{"intention", "create", "-replace", "other/web", "db"}, 1, `^$`, `only the "default" namespace is supported`},
		{[]string{"intention", "create", "a/b/c/d", "db"}, 1, `^$`, `invalid SRC "a/b/c/d": want <service>, <namespace>/<service> or <partition>/<namespace>/<service>`},
		{[]string{"intention", "create", "web", "/db"}, 1, `^$`, `invalid DST "/db": empty partition, namespace or service name`},
		{[]string{"intention", "check", "web", "x//db"}, 2, `^$`, `invalid service "x//db"`},
		{[]string{"intention", "delete", "default/web", "default/db"}, 0, `^Intention deleted\.\n$`, ""},
		{[]string{"intention", "list"}, 0, `No intentions found\.`, ""},
	}
	for _, st := range steps {
		r := runCLI(t, "", st.args...)
		if r.code != st.wantCode || !regexp.MustCompile(st.stdout).MatchString(r.stdout) || !strings.Contains(r.stderr, st.stderr) {
			t.Fatalf("%v: exit %d stdout %q stderr %q; want %d, /%s/, %q", st.args, r.code, r.stdout, r.stderr, st.wantCode, st.stdout, st.stderr)
		}
	}
}

// intention check -method/-path/-header names the L7 permission that decides.
func TestIntentionCheckL7(t *testing.T) {
	store := newConnectAPI(t)
	if _, err := store.Upsert(intention.Intention{SourceName: "web", DestinationName: "api", Permissions: []*intention.Permission{
		{Action: "deny", HTTP: &intention.HTTPPermission{PathPrefix: "/admin"}},
		{Action: "allow", HTTP: &intention.HTTPPermission{PathPrefix: "/", Header: []intention.HeaderPermission{{Name: "x-team", Exact: "blue"}}}},
	}}, true); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		args     []string
		wantCode int
		stdout   string
	}{
		{[]string{"intention", "check", "-path", "/admin/x", "web", "api"}, 1, `^Denied: denied by permission 1 of intention web => api \(2 permissions\): deny when path starts with /admin\n$`},
		{[]string{"intention", "check", "-method", "post", "-path", "/x", "-header", "X-Team: blue", "web", "api"}, 0, `^Allowed: allowed by permission 2 .*header x-team\n$`},
		{[]string{"intention", "check", "-path", "/x", "web", "api"}, 0, `^Allowed: allowed by the default policy: no permission`}, // default allow in dev
		{[]string{"intention", "check", "web", "api"}, 1, `^Denied\n$`},
		{[]string{"intention", "list"}, 0, `web\s+L7 \(2 permissions\)\s+api`},
	}
	for _, st := range steps {
		r := runCLI(t, "", st.args...)
		if r.code != st.wantCode || !regexp.MustCompile(st.stdout).MatchString(r.stdout) {
			t.Fatalf("%v: exit %d stdout %q stderr %q; want %d, /%s/", st.args, r.code, r.stdout, r.stderr, st.wantCode, st.stdout)
		}
	}
}
