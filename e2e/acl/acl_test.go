// Package acl holds the end-to-end tests of the ACL system against the
// real agent with acl { enabled = true }: the attacks of a token-less
// caller, a read-only token, a job registering a service it may not, and a
// service token reaching for another service's key, each refused on the
// Nomad API, the Consul-shaped API and the xDS port.
package acl

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/e2e/framework"
)

// policy applies rules as the named policy through the CLI.
func policy(t *testing.T, a *framework.Agent, name, rules string) {
	t.Helper()
	if r := a.CLIStdin([]byte(rules), "acl", "policy", "apply", name, "-"); r.Code != 0 {
		t.Fatalf("acl policy apply %s: exit %d: %s%s", name, r.Code, r.Stdout, r.Stderr)
	}
}

var secretLine = regexp.MustCompile(`(?m)^Secret ID\s*=\s*(\S+)$`)

// token creates a client token with the policies and returns its secret.
func token(t *testing.T, a *framework.Agent, name string, policies ...string) string {
	t.Helper()
	args := []string{"acl", "token", "create", "-name", name, "-type", "client"}
	for _, p := range policies {
		args = append(args, "-policy", p)
	}
	out := a.MustCLI(args...)
	m := secretLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("acl token create printed no Secret ID:\n%s", out)
	}
	return m[1]
}

func ptr[T any](v T) *T { return &v }

func denied(r framework.CLIResult) bool {
	out := r.Stdout + r.Stderr
	return r.Code != 0 && (strings.Contains(out, "Permission denied") || strings.Contains(out, "403"))
}

// Without a token nothing answers but what Nomad leaves open; a page in a
// browser is refused; the bootstrap happens once.
func TestAnonymousIsRefused(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	anon, err := nomadapi.NewClient(&nomadapi.Config{Address: a.HTTPAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, _, err := anon.Jobs().List(nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("job list without a token: %v, want 403", err)
	}
	job := &nomadapi.Job{ID: ptr("x"), Name: ptr("x"), Type: ptr("batch"), TaskGroups: []*nomadapi.TaskGroup{{Name: ptr("g"),
		Tasks: []*nomadapi.Task{{Name: "t", Driver: "raw_exec", Config: map[string]any{"command": "/bin/true"}}}}}}
	if _, _, err := anon.Jobs().Register(job, nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("job register without a token: %v, want 403", err)
	}
	if r := a.CLIAs("", "job", "status"); !denied(r) {
		t.Errorf("CLI job status without a token: exit %d %s%s, want Permission denied", r.Code, r.Stdout, r.Stderr)
	}
	consulAnon, err := consulapi.NewClient(&consulapi.Config{Address: strings.TrimPrefix(a.ConnectAddr, "http://")})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := consulAnon.Agent().ConnectCALeaf("count-api", nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("leaf of count-api without a token: %v, want 403", err)
	}
	// A web page's request, with the management token even: refused by
	// origin before any token is looked at.
	req, _ := http.NewRequest(http.MethodGet, a.HTTPAddr+"/v1/jobs", nil)
	req.Header.Set("Origin", "http://evil.example")
	req.Header.Set("X-Nomad-Token", a.Token)
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin request: %d, want 403", resp.StatusCode)
	}
	if r := a.CLIAs("", "acl", "bootstrap"); r.Code == 0 || !strings.Contains(r.Stdout+r.Stderr, "bootstrap already done") {
		t.Errorf("second acl bootstrap: exit %d %s%s, want it refused", r.Code, r.Stdout, r.Stderr)
	}
}

// A read token lists but cannot run; a write token without service write
// on count-api cannot register it; with it the job runs; a deleted token
// stops working at once.
func TestTokensAndServiceWrite(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	policy(t, a, "readonly", `namespace "default" { policy = "read" }`)
	policy(t, a, "deploy-other", `namespace "default" { policy = "write" }
service "other" { policy = "write" }`)
	policy(t, a, "deploy-api", `namespace "default" { policy = "write" }
service_prefix "count-api" { policy = "write" }`)
	read := token(t, a, "reader", "readonly")
	other := token(t, a, "other-deployer", "deploy-other")
	deployer := token(t, a, "api-deployer", "deploy-api")

	if r := a.CLIAs(read, "job", "status"); r.Code != 0 {
		t.Errorf("job status with a read token: exit %d %s%s", r.Code, r.Stdout, r.Stderr)
	}
	if r := a.CLIAs(read, "job", "run", "input/api-only.hcl"); !denied(r) {
		t.Errorf("job run with a read token: exit %d %s%s, want Permission denied", r.Code, r.Stdout, r.Stderr)
	}
	r := a.CLIAs(other, "job", "run", "input/api-only.hcl")
	if !denied(r) || !strings.Contains(r.Stdout+r.Stderr, "count-api") {
		t.Errorf("job run registering count-api without service write on it: exit %d %s%s, want Permission denied naming count-api", r.Code, r.Stdout, r.Stderr)
	}
	if jobs, _, err := a.Nomad().Jobs().List(nil); err != nil || len(jobs) != 0 {
		t.Fatalf("refused registrations left jobs: %v, %v", jobs, err)
	}
	if r := a.CLIAs(deployer, "job", "run", "-detach", "input/api-only.hcl"); r.Code != 0 {
		t.Fatalf("job run with service write on count-api: exit %d %s%s", r.Code, r.Stdout, r.Stderr)
	}
	a.RunningAllocs("acl-api", 1)

	// The deleted token is refused at once (the servers' caches follow the
	// ACL index).
	list := a.MustCLI("acl", "token", "list")
	var accessor string
	for _, line := range strings.Split(list, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "reader" {
			for _, w := range f {
				if len(w) == 36 && strings.Count(w, "-") == 4 {
					accessor = w
				}
			}
		}
	}
	if accessor == "" {
		t.Fatalf("no accessor for the reader token in:\n%s", list)
	}
	a.MustCLI("acl", "token", "delete", accessor)
	if r := a.CLIAs(read, "job", "status"); r.Code == 0 || !strings.Contains(r.Stdout+r.Stderr, "ACL token not found") {
		t.Errorf("job status with a deleted token: exit %d %s%s, want ACL token not found", r.Code, r.Stdout, r.Stderr)
	}
}
