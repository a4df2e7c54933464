package template

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/structs"
)

func testCatalog() *catalog.Catalog {
	c := catalog.New()
	c.Register(catalog.ServiceInstance{ID: "api-1", Name: "api", Address: "10.0.0.1", Port: 8080, Tags: []string{"v1", "http"},
		Meta: map[string]string{"zone": "a"}, AllocID: "alloc-1", NodeID: "node-1", Healthy: true})
	c.Register(catalog.ServiceInstance{ID: "api-2", Name: "api", Address: "10.0.0.2", Port: 8081, Tags: []string{"v2"},
		AllocID: "alloc-2", Healthy: true, Checks: []catalog.Check{{ID: "c", Status: "warning"}}})
	c.Register(catalog.ServiceInstance{ID: "api-3", Name: "api", Address: "10.0.0.3", Port: 8082, Healthy: false})
	c.Register(catalog.ServiceInstance{ID: "api-1-sidecar-proxy", Name: "api-sidecar-proxy", Kind: catalog.KindConnectProxy,
		Address: "10.0.0.1", Port: 21000, Healthy: true, Proxy: &catalog.Proxy{DestinationServiceName: "api"}})
	c.Register(catalog.ServiceInstance{ID: "db-1", Name: "db", NodeAddress: "192.0.2.9", Port: 5432, Healthy: true})
	return c
}

func renderText(t *testing.T, rc *renderCtx, text string) (string, error) {
	t.Helper()
	tm := &tmpl{text: text, left: "{{", right: "}}", out: fileSpec{rel: "x"}}
	out, err := tm.render(rc)
	return string(out), err
}

func TestRenderFunctions(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "local"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "local", "f.txt"), []byte("from file"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, text, want string }{
		{"env", `{{ env "NOMAD_ALLOC_ID" }}|{{ env "UNSET" }}|{{ env "attr.kernel.name" }}`, "a1||linux"},
		{"service passing", `{{ range service "api" }}{{ .ID }}={{ .Address }}:{{ .Port }} {{ end }}`, "api-1=10.0.0.1:8080 "},
		{"service statuses", `{{ range service "api" "passing,warning" }}{{ .ID }}:{{ .Status }} {{ end }}`,
			"api-1:passing api-2:warning "},
		{"service any", `{{ len (service "api" "any") }}`, "3"},
		{"service tag", `{{ range service "v2.api" "any" }}{{ .ID }}{{ end }}`, "api-2"},
		{"service fields", `{{ with index (service "api") 0 }}{{ .Name }} {{ .Tags }} {{ .ServiceMeta.zone }} {{ .Node }} {{ .Tags.Contains "http" }}{{ end }}`,
			"api [v1 http] a node-a true"},
		{"service node address", `{{ range service "db" }}{{ .Address }}{{ end }}`, "192.0.2.9"},
		{"services", `{{ range services }}{{ .Name }}{{ .Tags }};{{ end }}`, "api[http v1 v2];api-sidecar-proxy[];db[];"},
		{"nomadService", `{{ range nomadService "api" }}{{ .ServiceName }}/{{ .AllocID }}/{{ .Port }} {{ end }}`,
			"api/alloc-1/8080 api/alloc-2/8081 api//8082 "},
		{"file", `{{ file "local/f.txt" }}`, "from file"},
		{"json", `{{ $v := parseJSON "{\"a\":[1,2]}" }}{{ toJSON $v }}`, `{"a":[1,2]}`},
		{"strings", `{{ "a,B,c" | split "," | join ";" | toLower }} {{ toUpper "x" }} {{ "a-b" | replaceAll "-" "+" }} {{ trimSpace "  y " }}`,
			"a;b;c X a+b y"},
		{"contains", `{{ contains "v1" (index (service "api") 0).Tags }} {{ contains "zz" "azzb" }}`, "true true"},
		{"base64", `{{ base64Encode "hi" }} {{ base64Decode "aGk=" }}`, "aGk= hi"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rc := &renderCtx{cat: testCatalog(), env: map[string]string{"NOMAD_ALLOC_ID": "a1"}, taskDir: dir, nodeName: "node-a",
				lookup: func(k string) (string, bool) {
					v, ok := map[string]string{"attr.kernel.name": "linux"}[k]
					return v, ok
				}}
			got, err := renderText(t, rc, tc.text)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRenderUnsupportedFunctions(t *testing.T) {
	tests := []struct {
		text string
		want error
		msg  string
	}{
		{`{{ key "a/b" }}`, ErrNoKV, "key: no KV store in meshlet"},
		{`{{ keyOrDefault "a/b" "x" }}`, ErrNoKV, "keyOrDefault: no KV store in meshlet"},
		{`{{ with secret "kv/x" }}{{ end }}`, ErrNoVault, "secret: no Vault integration in meshlet"},
		{`{{ nomadVar "x" }}`, ErrNoVariables, "nomadVar: no Nomad variables in meshlet"},
		{`{{ file "../../etc/passwd" }}`, ErrEscapes, "path escapes the task's sandbox"},
	}
	for _, tc := range tests {
		rc := &renderCtx{cat: testCatalog(), taskDir: t.TempDir()}
		_, err := renderText(t, rc, tc.text)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %v, want %q (%v)", tc.text, err, tc.msg, tc.want)
		}
	}
	rc := &renderCtx{}
	if _, err := renderText(t, rc, `{{ service "api" }}`); !errors.Is(err, ErrNoCatalog) {
		t.Errorf("service without catalog: %v", err)
	}
	if _, err := renderText(t, &renderCtx{cat: testCatalog()}, `{{ service "api" "bogus" }}`); err == nil ||
		!strings.Contains(err.Error(), `invalid health status "bogus"`) {
		t.Errorf("bad status filter: %v", err)
	}
}

func TestRenderStrictMissing(t *testing.T) {
	rc := &renderCtx{cat: testCatalog(), strict: true}
	if _, err := renderText(t, rc, `{{ service "api" }}{{ service "nope" }}{{ service "v9.api" }}{{ nomadService "gone" }}`); err != nil {
		t.Fatal(err)
	}
	want := []string{"health.service(nope|passing)", "health.service(v9.api|passing)", "nomad.service(gone)"}
	if strings.Join(rc.missing, ",") != strings.Join(want, ",") {
		t.Errorf("missing %q, want %q", rc.missing, want)
	}
	rc = &renderCtx{cat: testCatalog()}
	out, err := renderText(t, rc, `[{{ range service "nope" }}x{{ end }}]`)
	if err != nil || out != "[]" || len(rc.missing) != 0 {
		t.Errorf("non-strict: %q %v %v", out, err, rc.missing)
	}
}

func TestRenderDelimsAndMissingKey(t *testing.T) {
	s := func(v string) *string { return &v }
	b := true
	tm, err := resolve(0, &structs.Template{EmbeddedTmpl: s(`[[ env "A" ]] {{ x }} [[ .nope ]]`), DestPath: s("local/o"),
		LeftDelim: s("[["), RightDelim: s("]]")}, Dirs{TaskDir: "/t", SharedDir: "/a"}, func(s string) string { return s })
	if err != nil {
		t.Fatal(err)
	}
	out, err := tm.render(&renderCtx{env: map[string]string{"A": "1"}})
	if err != nil || string(out) != "1 {{ x }} <no value>" {
		t.Errorf("got %q %v", out, err)
	}
	tm.errMissing = b
	if _, err := tm.render(&renderCtx{}); err == nil {
		t.Error("error_on_missing_key: no error")
	}
}

func TestParseEnv(t *testing.T) {
	got, err := parseEnv([]byte("# comment\n\nA=1\nexport B = two words\nC=\"quoted\"\nD='x'\nE=a=b\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"A": "1", "B": "two words", "C": "quoted", "D": "x", "E": "a=b"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, err := parseEnv([]byte("A=1\nnot a pair\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad line: %v", err)
	}
}

func TestSandbox(t *testing.T) {
	dirs := Dirs{TaskDir: "/d/alloc1/web", SharedDir: "/d/alloc1/alloc"}
	tests := []struct{ dest, root, rel string }{
		{"local/x.conf", dirs.TaskDir, "local/x.conf"},
		{"/local/x.conf", dirs.TaskDir, "local/x.conf"},
		{"/d/alloc1/web/secrets/s", dirs.TaskDir, "secrets/s"},
		{"../alloc/shared.txt", dirs.SharedDir, "shared.txt"},
		{"/alloc/data/x", dirs.SharedDir, "data/x"},
		{"/d/alloc1/alloc/y", dirs.SharedDir, "y"},
		{"/etc/passwd", dirs.TaskDir, "etc/passwd"},
	}
	for _, tc := range tests {
		root, rel, err := sandbox(dirs, tc.dest)
		if err != nil || root != tc.root || rel != tc.rel {
			t.Errorf("%s: got %s %s %v, want %s %s", tc.dest, root, rel, err, tc.root, tc.rel)
		}
	}
	for _, bad := range []string{"../../etc/passwd", "../other/local/x", "", ".",
		"/alloc/run/meshlet_grpc.sock", "/alloc/run", "../alloc/run/x", "/d/alloc1/alloc/run/y"} { // alloc/run is the agent's
		if _, _, err := sandbox(dirs, bad); !errors.Is(err, ErrEscapes) {
			t.Errorf("%q: err %v, want ErrEscapes", bad, err)
		}
	}
}

func TestWriteIfChangedDoesNotFollowLinks(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "local")); err != nil {
		t.Fatal(err)
	}
	_, err := writeIfChanged(fileSpec{root: root, rel: "local/x", mode: 0o644, uid: -1, gid: -1}, []byte("x"))
	if err == nil {
		t.Fatal("wrote through a linked directory")
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); !os.IsNotExist(err) {
		t.Errorf("file appeared outside the sandbox: %v", err)
	}
	// A link at the file's place is replaced, not followed.
	target := filepath.Join(outside, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(root, "f")); err != nil {
		t.Fatal(err)
	}
	spec := fileSpec{root: root, rel: "f", mode: 0o640, uid: -1, gid: -1}
	if ch, err := writeIfChanged(spec, []byte("new")); err != nil || !ch {
		t.Fatalf("write: %v %v", ch, err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("link target changed to %q", b)
	}
	fi, err := os.Lstat(spec.path())
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o640 {
		t.Errorf("file: %v %v", fi.Mode(), err)
	}
	if ch, err := writeIfChanged(spec, []byte("new")); err != nil || ch {
		t.Errorf("same content rewritten: %v %v", ch, err)
	}
}
