package command

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
)

// kvValue returns the value of "Key = value" in out ("" if absent).
func kvValue(out, key string) string {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + ` += (.*)$`).FindStringSubmatch(out)
	if m == nil {
		return ""
	}
	return m[1]
}

// bootstrap runs acl bootstrap against f and returns the management
// token's secret, set as MESHLET_TOKEN.
func bootstrap(t *testing.T) string {
	t.Helper()
	r := runCLI(t, "", "acl", "bootstrap")
	if r.code != 0 {
		t.Fatalf("bootstrap: exit %d, stderr %q", r.code, r.stderr)
	}
	secret := kvValue(r.stdout, "Secret ID")
	if len(secret) != 36 {
		t.Fatalf("bootstrap printed no secret:\n%s", r.stdout)
	}
	t.Setenv("MESHLET_TOKEN", secret)
	return secret
}

func TestACLBootstrap(t *testing.T) {
	f := newFakeACL(t)
	r := runCLI(t, "", "acl", "bootstrap")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	// Nomad's outputACLToken: aligned keys, management tokens have no policies.
	for _, line := range []string{
		"Accessor ID  = ", "Secret ID    = ", "Name         = Bootstrap Token", "Type         = management",
		"Global       = true", "Create Time  = 2096-12-04 17:00:00 +0000 UTC", "Expiry Time  = <none>",
		"Create Index = 1", "Modify Index = 1", "Policies     = n/a",
	} {
		if !strings.Contains(r.stdout, line) {
			t.Errorf("output lacks %q:\n%s", line, r.stdout)
		}
	}
	if got := f.lastToken(); got != "" {
		t.Errorf("bootstrap sent token %q, want none", got)
	}
	r = runCLI(t, "", "acl", "bootstrap", "-json")
	if r.code != 1 || r.stderr != "Error: failed to bootstrap the ACL system: ACL bootstrap already done (reset index: 1) (HTTP 400)\n" {
		t.Errorf("second bootstrap: exit %d, stderr %q", r.code, r.stderr)
	}
}

// acl bootstrap FILE makes the management token with the secret the file
// holds (Nomad's bootstrap secret), so provisioning can choose it.
func TestACLBootstrapSecretFile(t *testing.T) {
	newFakeACL(t)
	const secret = "6a1f4f9e-1c1b-4a64-9a53-3f2f3f0b8e2d"
	path := filepath.Join(t.TempDir(), "management-token")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "", "acl", "bootstrap", path)
	if r.code != 0 || !strings.Contains(r.stdout, "Secret ID    = "+secret+"\n") {
		t.Fatalf("bootstrap with a secret file: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "acl", "bootstrap", filepath.Join(t.TempDir(), "missing")); r.code != 1 ||
		!strings.Contains(r.stderr, "failed to read the bootstrap secret file") {
		t.Errorf("bootstrap with a missing file: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestACLPolicyCommands(t *testing.T) {
	f := newFakeACL(t)
	if r := runCLI(t, "", "acl", "policy", "list"); r.code != 1 ||
		!strings.Contains(r.stderr, "ACL token not found (HTTP 403) (no ACL token was sent: set -token or MESHLET_TOKEN or NOMAD_TOKEN)") {
		t.Errorf("list without a token: exit %d, stderr %q", r.code, r.stderr)
	}
	secret := bootstrap(t)
	rules := "namespace \"default\" {\n\tpolicy = \"read\"\n}\n"
	file := writeFile(t, "readonly.hcl", rules)
	r := runCLI(t, "", "acl", "policy", "apply", "-description", "Read jobs", "readonly", file)
	if r.code != 0 || r.stdout != "Successfully wrote \"readonly\" ACL policy!\n" {
		t.Fatalf("apply: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if got := f.lastToken(); got != secret {
		t.Errorf("apply sent token %q, want MESHLET_TOKEN %q", got, secret)
	}
	if r := runCLI(t, "node { policy = \"read\" }\n", "acl", "policy", "apply", "nodes", "-"); r.code != 0 {
		t.Fatalf("apply from stdin: exit %d, stderr %q", r.code, r.stderr)
	}
	if p := f.policies["nodes"]; p == nil || p.Rules != "node { policy = \"read\" }\n" {
		t.Errorf("policy read from stdin = %+v", p)
	}

	r = runCLI(t, "", "acl", "policy", "list")
	want := "Name      Description\nnodes     \nreadonly  Read jobs\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("list: exit %d, stdout %q, want %q", r.code, r.stdout, want)
	}
	r = runCLI(t, "", "acl", "policy", "list", "-json")
	var stubs []nomadapi.ACLPolicyListStub
	if err := json.Unmarshal([]byte(r.stdout), &stubs); err != nil || len(stubs) != 2 || stubs[1].Description != "Read jobs" {
		t.Errorf("list -json = %v %+v:\n%s", err, stubs, r.stdout)
	}

	r = runCLI(t, "", "acl", "policy", "info", "readonly")
	want = "Name        = readonly\nDescription = Read jobs\nCreateIndex = 2\nModifyIndex = 2\n\nRules\n\n" + rules
	if r.code != 0 || r.stdout != want {
		t.Errorf("info: exit %d, stdout %q, want %q", r.code, r.stdout, want)
	}
	r = runCLI(t, "", "acl", "policy", "info", "-json", "readonly")
	var p nomadapi.ACLPolicy
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || p.Rules != rules {
		t.Errorf("info -json = %v %+v", err, p)
	}

	if r := runCLI(t, "", "acl", "policy", "delete", "nodes"); r.code != 0 || r.stdout != "Successfully deleted nodes policy!\n" {
		t.Errorf("delete: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "acl", "policy", "info", "nodes"); r.code != 1 ||
		r.stderr != "Error: failed to read ACL policy \"nodes\": ACL policy not found (HTTP 404)\n" {
		t.Errorf("info of a deleted policy: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestACLPolicyRulesEscaped: rules cannot drive the terminal; tabs stay.
func TestACLPolicyRulesEscaped(t *testing.T) {
	f := newFakeACL(t)
	bootstrap(t)
	f.policies["evil"] = &nomadapi.ACLPolicy{Name: "evil", Rules: "a\tb\x1b[2Jc\n"}
	r := runCLI(t, "", "acl", "policy", "info", "evil")
	if r.code != 0 || !strings.HasSuffix(r.stdout, "\nRules\n\na\tb\\x1b[2Jc\n") {
		t.Errorf("info: exit %d, stdout %q", r.code, r.stdout)
	}
}

func TestACLTokenCommands(t *testing.T) {
	f := newFakeACL(t)
	bootstrap(t)
	r := runCLI(t, "", "acl", "token", "create", "-name", "ci", "-policy", "readonly", "-policy", "deploy", "-ttl", "1h", "-global")
	if r.code != 0 {
		t.Fatalf("create: exit %d, stderr %q", r.code, r.stderr)
	}
	accessor, secret := kvValue(r.stdout, "Accessor ID"), kvValue(r.stdout, "Secret ID")
	if len(accessor) != 36 || len(secret) != 36 || kvValue(r.stdout, "Policies") != "[readonly deploy]" ||
		kvValue(r.stdout, "Expiry Time") != "2096-12-04 18:00:00 +0000 UTC" || kvValue(r.stdout, "Global") != "true" {
		t.Fatalf("create output:\n%s", r.stdout)
	}

	r = runCLI(t, "", "acl", "token", "list")
	if r.code != 0 || !regexp.MustCompile(`(?m)^Name +Type +Global +Accessor ID +Expired$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^ci +client +true +`+accessor+` +false$`).MatchString(r.stdout) {
		t.Errorf("list: exit %d, stdout:\n%s", r.code, r.stdout)
	}
	r = runCLI(t, "", "acl", "token", "list", "-json")
	var stubs []nomadapi.ACLTokenListStub
	if err := json.Unmarshal([]byte(r.stdout), &stubs); err != nil || len(stubs) != 2 {
		t.Errorf("list -json = %v %+v", err, stubs)
	}

	// info and update never show the secret, though the agent sends it.
	for _, args := range [][]string{
		{"info", accessor}, {"info", "-json", accessor}, {"update", "-name", "ci-ro", "-policy", "readonly", accessor},
	} {
		r = runCLI(t, "", append([]string{"acl", "token"}, args...)...)
		if r.code != 0 || strings.Contains(r.stdout, secret) || !strings.Contains(r.stdout, accessor) {
			t.Errorf("%v: exit %d, stderr %q, stdout:\n%s", args, r.code, r.stderr, r.stdout)
		}
	}
	if tok := f.tokens[accessor]; tok.Name != "ci-ro" || len(tok.Policies) != 1 || !tok.Global || tok.SecretID != secret {
		t.Errorf("token after update = %+v", tok)
	}
	if r := runCLI(t, "", "acl", "token", "info", accessor); kvValue(r.stdout, "Secret ID") != "<hidden>" || kvValue(r.stdout, "Name") != "ci-ro" {
		t.Errorf("info:\n%s", r.stdout)
	}

	// self shows the caller's own token, secret included.
	r = runCLI(t, "", "acl", "token", "self", "-token", secret)
	if r.code != 0 || kvValue(r.stdout, "Secret ID") != secret || kvValue(r.stdout, "Accessor ID") != accessor {
		t.Errorf("self: exit %d, stderr %q, stdout:\n%s", r.code, r.stderr, r.stdout)
	}
	if r := runCLI(t, "", "acl", "token", "list", "-token", secret); r.code != 1 || !strings.Contains(r.stderr, "Permission denied (HTTP 403)\n") {
		t.Errorf("list with a client token: exit %d, stderr %q", r.code, r.stderr)
	}

	if r := runCLI(t, "", "acl", "token", "delete", accessor); r.code != 0 || r.stdout != "Token "+accessor+" successfully deleted\n" {
		t.Errorf("delete: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "acl", "token", "self", "-token", secret); r.code != 1 || !strings.Contains(r.stderr, "ACL token not found (HTTP 403)") {
		t.Errorf("self with a deleted token: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestACLTokenCreateManagement(t *testing.T) {
	newFakeACL(t)
	bootstrap(t)
	r := runCLI(t, "", "acl", "token", "create", "-name", "ops", "-type", "management", "-json")
	var tok nomadapi.ACLToken
	if err := json.Unmarshal([]byte(r.stdout), &tok); r.code != 0 || err != nil || tok.Type != "management" || tok.SecretID == "" {
		t.Fatalf("create -json: exit %d, %v, %+v", r.code, err, tok)
	}
	r = runCLI(t, "", "acl", "token", "update", "-type", "client", "-policy", "readonly", tok.AccessorID)
	if r.code != 0 || kvValue(r.stdout, "Type") != "client" || kvValue(r.stdout, "Policies") != "[readonly]" {
		t.Errorf("update to client: exit %d, stderr %q, stdout:\n%s", r.code, r.stderr, r.stdout)
	}
}

func TestACLUsageErrors(t *testing.T) {
	newFakeACL(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"bootstrap", "x", "y"}, "acl bootstrap takes at most one argument, a file holding the secret"},
		{[]string{"policy", "apply", "readonly"}, "expected two arguments: the policy NAME and its rules FILE"},
		{[]string{"policy", "apply", "../token/x", "f.hcl"}, `invalid policy name "../token/x"`},
		{[]string{"policy", "info"}, "expected one argument: the policy NAME"},
		{[]string{"policy", "delete", "a", "b"}, "expected one argument: the policy NAME"},
		{[]string{"policy", "list", "x"}, "acl policy list takes no arguments"},
		{[]string{"token", "create", "-type", "root"}, `-type "root" must be client or management`},
		{[]string{"token", "create", "-type", "management", "-policy", "p"}, "a management token takes no -policy"},
		{[]string{"token", "create", "-name", "x"}, "a client token needs at least one -policy"},
		{[]string{"token", "create", "-policy", "p", "-ttl", "soon"}, `-ttl "soon" must be a positive duration`},
		{[]string{"token", "create", "-policy", "p", "-ttl", "-1h"}, `-ttl "-1h" must be a positive duration`},
		{[]string{"token", "info"}, "expected one argument: the token's ACCESSOR ID"},
		{[]string{"token", "info", "a/b"}, `invalid accessor ID "a/b"`},
		{[]string{"token", "update", "abcd"}, "nothing to update: give -name, -type, -policy or -global"},
		{[]string{"token", "update", "-type", "x", "abcd"}, `-type "x" must be client or management`},
		{[]string{"token", "delete"}, "expected one argument: the token's ACCESSOR ID"},
		{[]string{"token", "list", "-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"token", "frob"}, `unknown command "acl token frob"`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runCLI(t, "", append([]string{"acl"}, tc.args...)...)
			first, _, _ := strings.Cut(r.stderr, "\n")
			if r.code != 1 || !strings.Contains(first, tc.want) || !strings.HasPrefix(first, "Error: ") {
				t.Errorf("exit %d, stderr %q, want one line with %q", r.code, r.stderr, tc.want)
			}
		})
	}
	if r := runCLI(t, "", "acl", "token", "self"); r.code != 1 || r.stderr != "Error: no ACL token to look up: set -token, MESHLET_TOKEN or NOMAD_TOKEN\n" {
		t.Errorf("self without a token: exit %d, stderr %q", r.code, r.stderr)
	}
}
