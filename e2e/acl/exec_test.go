package acl

import (
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/e2e/framework"
)

// alloc exec needs alloc-exec, and a raw_exec task (a root shell on the
// node) also alloc-node-exec; an exec task seen through alloc exec is in
// its own jail: its directory as /, its own processes, nobody.
func TestAllocExecCapabilitiesAndIsolation(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	allocs := a.RunningAllocs(a.RunJob("input/isolated.hcl"), 1)
	id := allocs[0].ID
	policy(t, a, "reader", `namespace "default" { policy = "read" }`)
	policy(t, a, "operator", `namespace "default" { policy = "write" }`)
	reader, writer := token(t, a, "reader", "reader"), token(t, a, "operator", "operator")

	if r := a.CLIAs(reader, "alloc", "exec", "-task", "jailed", id, "/bin/true"); !denied(r) {
		t.Errorf("alloc exec with a read token: exit %d %s%s, want Permission denied", r.Code, r.Stdout, r.Stderr)
	}
	if r := a.CLIAs(writer, "alloc", "exec", "-task", "host", id, "/bin/true"); !denied(r) {
		t.Errorf("alloc exec into raw_exec without alloc-node-exec: exit %d %s%s, want Permission denied", r.Code, r.Stdout, r.Stderr)
	}
	var out string
	a.Eventually(30*time.Second, "the exec task's own file", func() bool {
		r := a.CLIAs(writer, "alloc", "exec", "-task", "jailed", id, "/bin/sh", "-c",
			`cat /local/mine; id -u; ls /; ls /proc | grep -c '^[0-9]'`)
		out = r.Stdout
		return r.Code == 0 && strings.HasPrefix(out, "secret\n")
	})
	lines := strings.Fields(out)
	if len(lines) < 3 || lines[1] != "65534" {
		t.Fatalf("alloc exec in the exec task printed %q, want its file then uid 65534 (nobody)", out)
	}
	root := strings.Join(lines[2:len(lines)-1], " ")
	for _, want := range []string{"local", "secrets", "alloc", "usr"} {
		if !strings.Contains(" "+root+" ", " "+want+" ") {
			t.Errorf("/ inside the exec task = %q, want %s in it", root, want)
		}
	}
	if strings.Contains(" "+root+" ", " root ") || strings.Contains(" "+root+" ", " var ") {
		t.Errorf("/ inside the exec task = %q: the host's /root or /var is visible", root)
	}
	if n := lines[len(lines)-1]; n == "" || len(n) > 2 {
		t.Errorf("the exec task sees %s processes, want only its own few", n)
	}
}
