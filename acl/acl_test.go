package acl

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// compile parses each text and compiles them together, failing t on a
// parse error.
func compile(t *testing.T, texts ...string) *ACL {
	t.Helper()
	var rules []*PolicyRules
	for _, text := range texts {
		r, err := Parse(text)
		if err != nil {
			t.Fatalf("Parse(%q): %v", text, err)
		}
		rules = append(rules, r)
	}
	return Compile(rules...)
}

// allowedIn lists the namespace capabilities a allows in ns, sorted.
func allowedIn(a *ACL, ns string) []string {
	var got []string
	for _, c := range namespaceCapabilities {
		if a.AllowNamespaceOperation(ns, c) {
			got = append(got, c)
		}
	}
	slices.Sort(got)
	return got
}

func sorted(vs ...string) []string {
	out := slices.Clone(vs)
	slices.Sort(out)
	return out
}

func TestNamespacePolicyExpansion(t *testing.T) {
	read := []string{"list-jobs", "parse-job", "read-job", "csi-list-volume", "csi-read-volume",
		"list-scaling-policies", "read-scaling-policy", "read-job-scaling"}
	cases := []struct {
		rule string
		want []string
	}{
		{`policy = "deny"`, nil},
		{`policy = "read"`, sorted(read...)},
		{`policy = "write"`, sorted("list-jobs", "parse-job", "read-job", "submit-job", "dispatch-job",
			"read-logs", "read-fs", "alloc-exec", "alloc-lifecycle", "csi-write-volume", "csi-mount-volume",
			"list-scaling-policies", "read-scaling-policy", "read-job-scaling", "scale-job",
			// implied by csi-write-volume and csi-mount-volume:
			"csi-read-volume", "csi-list-volume")},
		{`policy = "scale"`, sorted("list-scaling-policies", "read-scaling-policy", "read-job-scaling", "scale-job")},
		// Nomad: "If you provide both a policy and capabilities list, the capabilities are merged."
		{"policy = \"read\"\ncapabilities = [\"submit-job\"]", sorted(append(read, "submit-job")...)},
		// Implied capabilities: read-fs grants read-logs, list-jobs csi-list-volume.
		{`capabilities = ["read-fs", "list-jobs"]`, sorted("read-fs", "read-logs", "list-jobs", "csi-list-volume")},
		{`capabilities = ["csi-mount-volume"]`, sorted("csi-mount-volume", "csi-read-volume", "csi-list-volume")},
		{"policy = \"write\"\ncapabilities = [\"deny\"]", nil},
		{``, nil},
	}
	for _, tc := range cases {
		a := compile(t, "namespace \"default\" {\n"+tc.rule+"\n}")
		if got := allowedIn(a, "default"); !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got %v\nwant %v", tc.rule, got, tc.want)
		}
		if got := allowedIn(a, "other"); got != nil {
			t.Errorf("%s: namespace other allows %v, want nothing", tc.rule, got)
		}
		if a.AllowNamespace("default") != (tc.want != nil) {
			t.Errorf("%s: AllowNamespace = %v", tc.rule, !(tc.want != nil))
		}
	}
}

func TestNamespaceWithoutLabelIsDefault(t *testing.T) {
	a := compile(t, "namespace {\n  policy = \"read\"\n}")
	if !a.AllowNamespaceOperation("default", NamespaceCapabilityReadJob) || !a.AllowNamespaceOperation("", NamespaceCapabilityReadJob) {
		t.Error("unlabeled namespace rule does not apply to default (nor to \"\")")
	}
	if a.AllowNamespaceOperation("prod", NamespaceCapabilityReadJob) {
		t.Error("unlabeled namespace rule applies to prod")
	}
}

func TestNamespaceGlobPrecedence(t *testing.T) {
	a := compile(t, `
namespace "*-web" { policy = "deny" }
namespace "*" { policy = "write" }
namespace "prod-*" { policy = "read" }
namespace "prod-web" { policy = "scale" }
namespace "a*" { capabilities = ["read-logs"] }
namespace "*a" { capabilities = ["read-fs"] }
`)
	cases := []struct {
		ns, capability string
		want           bool
	}{
		// Nomad's documented example: "*-web" is 9 characters from
		// "production-web", "*" is 13.
		{"production-web", NamespaceCapabilityListJobs, false},
		{"production-api", NamespaceCapabilitySubmitJob, true},
		// An exact rule wins over every glob, even a less permissive one.
		{"prod-web", NamespaceCapabilityScaleJob, true},
		{"prod-web", NamespaceCapabilityListJobs, false},
		// "prod-*" keeps 5 literal characters of "prod-api", "*" none.
		{"prod-api", NamespaceCapabilityReadJob, true},
		{"prod-api", NamespaceCapabilitySubmitJob, false},
		// "prod-*" (5) beats "*-web" (4) on "prod-x-web".
		{"prod-x-web", NamespaceCapabilityReadJob, true},
		// A tie ("a*" and "*a" on "aa") goes to the smaller pattern, "*a".
		{"aa", NamespaceCapabilityReadFS, true},
		{"aa", NamespaceCapabilitySubmitJob, false},
	}
	for _, tc := range cases {
		if got := a.AllowNamespaceOperation(tc.ns, tc.capability); got != tc.want {
			t.Errorf("AllowNamespaceOperation(%q, %q) = %v, want %v", tc.ns, tc.capability, got, tc.want)
		}
	}
	if b := compile(t, `namespace "team-*" { policy = "read" }`); b.AllowNamespace("other") {
		t.Error("a namespace no rule matches is allowed")
	}
}

func TestGlobMatch(t *testing.T) {
	cases := []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"a*", "a", true}, {"a*c", "abbc", true},
		{"a*c", "abcb", false}, {"*-web", "prod-web", true}, {"*-web", "prod-web2", false},
		{"a*b*c", "axxbyyc", true}, {"a*b*c", "axxbyy", false}, {"abc", "abc", true},
		{"abc", "abd", false}, {"**", "x", true}, {"*ab", "aab", true},
	}
	for _, tc := range cases {
		if got := globMatch(tc.pattern, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

func TestMergeAcrossPolicies(t *testing.T) {
	// Capabilities are unioned.
	a := compile(t, `namespace "default" { policy = "read" }`, `namespace "default" { capabilities = ["submit-job"] }`)
	if !a.AllowNamespaceOperation("default", NamespaceCapabilityReadJob) || !a.AllowNamespaceOperation("default", NamespaceCapabilitySubmitJob) {
		t.Error("capabilities of two policies are not unioned")
	}
	// A deny capability or policy in any policy wins.
	for _, deny := range []string{`capabilities = ["deny"]`, `policy = "deny"`} {
		a = compile(t, `namespace "default" { policy = "write" }`, "namespace \"default\" {\n"+deny+"\n}")
		if got := allowedIn(a, "default"); got != nil {
			t.Errorf("write + %s allows %v", deny, got)
		}
	}
	// The deny applies to its own label only.
	a = compile(t, `namespace "*" { policy = "write" }`, `namespace "prod" { policy = "deny" }`)
	if a.AllowNamespace("prod") || !a.AllowNamespaceOperation("dev", NamespaceCapabilitySubmitJob) {
		t.Error("deny on prod leaked to dev, or did not apply to prod")
	}

	// Coarse rules: deny wins, else the most permissive.
	a = compile(t, `node { policy = "read" }`, `node { policy = "write" }`, `agent { policy = "write" }`,
		`agent { policy = "deny" }`, `operator { policy = "read" }`, `quota { policy = "write" }`)
	checks := map[string][2]bool{
		"node":     {a.AllowNodeRead(), a.AllowNodeWrite()},
		"agent":    {a.AllowAgentRead(), a.AllowAgentWrite()},
		"operator": {a.AllowOperatorRead(), a.AllowOperatorWrite()},
		"quota":    {a.AllowQuotaRead(), a.AllowQuotaWrite()},
	}
	want := map[string][2]bool{
		"node": {true, true}, "agent": {false, false}, "operator": {true, false}, "quota": {true, true},
	}
	for rule, got := range checks {
		if got != want[rule] {
			t.Errorf("%s read/write = %v, want %v", rule, got, want[rule])
		}
	}
}

func TestPluginRule(t *testing.T) {
	cases := map[string][2]bool{ // policy: list, read
		"list": {true, false}, "read": {true, true}, "write": {true, true}, "deny": {false, false},
	}
	for policy, want := range cases {
		a := compile(t, `plugin { policy = "`+policy+`" }`, `plugin { policy = "list" }`)
		if got := [2]bool{a.AllowPluginList(), a.AllowPluginRead()}; got != want {
			t.Errorf("plugin %s + list: list/read = %v, want %v", policy, got, want)
		}
	}
}

func TestHostVolumeRules(t *testing.T) {
	a := compile(t, `
host_volume "*" { policy = "write" }
host_volume "prod-*" { policy = "deny" }
host_volume "prod-ca-certificates" { policy = "read" }
host_volume "scratch" { capabilities = ["mount-readwrite"] }
`)
	cases := []struct {
		name, capability string
		want             bool
	}{
		{"data", HostVolumeCapabilityMountReadWrite, true},
		{"prod-db", HostVolumeCapabilityMountReadOnly, false},
		{"prod-ca-certificates", HostVolumeCapabilityMountReadOnly, true},
		{"prod-ca-certificates", HostVolumeCapabilityMountReadWrite, false},
		{"scratch", HostVolumeCapabilityMountReadOnly, true}, // implied by mount-readwrite
	}
	for _, tc := range cases {
		if got := a.AllowHostVolumeOperation(tc.name, tc.capability); got != tc.want {
			t.Errorf("AllowHostVolumeOperation(%q, %q) = %v, want %v", tc.name, tc.capability, got, tc.want)
		}
	}
	if a.AllowHostVolume("prod-db") || !a.AllowHostVolume("data") {
		t.Error("AllowHostVolume disagrees with the rules")
	}
}

func TestServiceRules(t *testing.T) {
	a := compile(t, `
service_prefix "" { policy = "read" }
service_prefix "web" { policy = "write" }
service_prefix "web-admin" { policy = "deny" }
service "web-admin-ui" { policy = "read" }
service "db" { policy = "deny" }
`)
	cases := []struct {
		name        string
		read, write bool
	}{
		{"billing", true, false},        // service_prefix "" matches everything
		{"web-1", true, true},           // longest prefix: "web"
		{"web-admin-x", false, false},   // longer prefix "web-admin" denies
		{"web-admin-ui", true, false},   // exact rule beats every prefix
		{"db", false, false},            // exact deny beats the "" prefix
		{"dbx", true, false},            // exact rules match only their name
		{"", true, false},               // the empty name still matches ""
		{"web-admin", false, false},     // a prefix matches its own name
		{"webadmin", true, true},        // ...and plain string prefixes, not path segments
		{"web-admin-ui2", false, false}, // exact "web-admin-ui" is not a prefix
	}
	for _, tc := range cases {
		if got := a.AllowServiceRead(tc.name); got != tc.read {
			t.Errorf("AllowServiceRead(%q) = %v, want %v", tc.name, got, tc.read)
		}
		if got := a.AllowServiceWrite(tc.name); got != tc.write {
			t.Errorf("AllowServiceWrite(%q) = %v, want %v", tc.name, got, tc.write)
		}
	}
	if b := compile(t, `service "web" { policy = "write" }`); b.AllowServiceRead("api") {
		t.Error("a service without a rule is readable")
	}
}

func TestServiceMergeDenyWins(t *testing.T) {
	a := compile(t, `service "web" { policy = "write" }`, `service "web" { policy = "deny" }`,
		`service_prefix "" { policy = "write" }`, `service_prefix "" { policy = "read" }`)
	if a.AllowServiceRead("web") {
		t.Error("deny on web in one policy did not win over write in another")
	}
	if !a.AllowServiceWrite("api") {
		t.Error("write and read on the same prefix did not merge to write")
	}
}

func TestIntentionRules(t *testing.T) {
	cases := []struct {
		name        string
		policies    []string
		dest        string
		read, write bool
	}{
		// Consul: service:read or service:write implicitly grant intentions:read.
		{"read implies read", []string{`service "web" { policy = "read" }`}, "web", true, false},
		{"write implies read only", []string{`service "web" { policy = "write" }`}, "web", true, false},
		{"explicit write", []string{`service "web" {
  policy     = "read"
  intentions = "write"
}`}, "web", true, true},
		{"deny implies deny", []string{`service "web" { policy = "deny" }`}, "web", false, false},
		{"explicit deny", []string{`service "web" {
  policy     = "write"
  intentions = "deny"
}`}, "web", false, false},
		{"prefix", []string{`service_prefix "" {
  policy     = "read"
  intentions = "write"
}`}, "anything", true, true},
		{"exact beats prefix", []string{`service_prefix "" {
  policy     = "read"
  intentions = "write"
}`, `service "db" { policy = "read" }`}, "db", true, false},
		{"deny of one policy wins", []string{`service "web" { policy = "deny" }`, `service "web" {
  policy     = "write"
  intentions = "write"
}`}, "web", false, false},
		{"no rule", []string{`node { policy = "write" }`}, "web", false, false},
		// Consul: destination "*" needs read on any rule, write on all.
		{"star read from any rule", []string{`service "web" { policy = "read" }`}, "*", true, false},
		{"star write from the empty prefix", []string{`service_prefix "" {
  policy     = "write"
  intentions = "write"
}`}, "*", true, true},
		{"star write spoilt by a lesser rule", []string{`service_prefix "" {
  policy     = "write"
  intentions = "write"
}`, `service "db" { policy = "read" }`}, "*", true, false},
		{"star write needs the empty prefix", []string{`service_prefix "a" {
  policy     = "write"
  intentions = "write"
}`}, "*", true, false},
	}
	for _, tc := range cases {
		a := compile(t, tc.policies...)
		if got := a.AllowIntentionRead(tc.dest); got != tc.read {
			t.Errorf("%s: AllowIntentionRead(%q) = %v, want %v", tc.name, tc.dest, got, tc.read)
		}
		if got := a.AllowIntentionWrite(tc.dest); got != tc.write {
			t.Errorf("%s: AllowIntentionWrite(%q) = %v, want %v", tc.name, tc.dest, got, tc.write)
		}
	}
}

func TestMeshRule(t *testing.T) {
	cases := []struct {
		name        string
		policies    []string
		read, write bool
	}{
		{"mesh read", []string{`mesh = "read"`}, true, false},
		{"mesh write", []string{`mesh = "write"`}, true, true},
		{"merged, deny wins", []string{`mesh = "write"`, `mesh = "deny"`}, false, false},
		{"merged, most permissive", []string{`mesh = "read"`, `mesh = "write"`}, true, true},
		// Consul: without a mesh rule, the operator rule decides.
		{"operator fallback", []string{`operator { policy = "write" }`}, true, true},
		{"mesh overrides operator", []string{`operator { policy = "write" }`, `mesh = "read"`}, true, false},
		{"mesh deny overrides operator", []string{`operator { policy = "write" }`, `mesh = "deny"`}, false, false},
		{"nothing", []string{`node { policy = "write" }`}, false, false},
	}
	for _, tc := range cases {
		a := compile(t, tc.policies...)
		if got := [2]bool{a.AllowMeshRead(), a.AllowMeshWrite()}; got != [2]bool{tc.read, tc.write} {
			t.Errorf("%s: mesh read/write = %v, want %v", tc.name, got, [2]bool{tc.read, tc.write})
		}
	}
}

// checks is every method of an ACL, by name.
func checks(a *ACL) map[string]bool {
	return map[string]bool{
		"namespace": a.AllowNamespaceOperation("default", NamespaceCapabilityReadJob),
		"anyNS":     a.AllowNamespace("default"),
		"hostVol":   a.AllowHostVolumeOperation("v", HostVolumeCapabilityMountReadOnly),
		"anyHV":     a.AllowHostVolume("v"),
		"nodeR":     a.AllowNodeRead(), "nodeW": a.AllowNodeWrite(),
		"agentR": a.AllowAgentRead(), "agentW": a.AllowAgentWrite(),
		"operR": a.AllowOperatorRead(), "operW": a.AllowOperatorWrite(),
		"quotaR": a.AllowQuotaRead(), "quotaW": a.AllowQuotaWrite(),
		"pluginL": a.AllowPluginList(), "pluginR": a.AllowPluginRead(),
		"meshR": a.AllowMeshRead(), "meshW": a.AllowMeshWrite(),
		"svcR": a.AllowServiceRead("web"), "svcW": a.AllowServiceWrite("web"),
		"ixnR": a.AllowIntentionRead("web"), "ixnW": a.AllowIntentionWrite("web"),
		"ixnStarW": a.AllowIntentionWrite("*"),
	}
}

func TestManagementNilAndEmpty(t *testing.T) {
	for name, a := range map[string]*ACL{"nil": nil, "management": ManagementACL()} {
		if !a.IsManagement() {
			t.Errorf("%s: IsManagement = false", name)
		}
		for check, ok := range checks(a) {
			if !ok {
				t.Errorf("%s: %s denied", name, check)
			}
		}
	}
	empty := Compile()
	if empty.IsManagement() {
		t.Error("Compile() is a management ACL")
	}
	for check, ok := range checks(empty) {
		if ok {
			t.Errorf("Compile(): %s allowed", check)
		}
	}
	if n := len(checks(empty)); n != 21 {
		t.Errorf("checks covers %d methods, want 21", n)
	}
}

func TestNewACL(t *testing.T) {
	a, err := NewACL(true, []*Policy{{Name: "broken", Rules: "nope"}})
	if err != nil || !a.IsManagement() {
		t.Fatalf("NewACL(management) = %v, %v", a, err)
	}
	a, err = NewACL(false, []*Policy{
		{Name: "ns", Rules: `namespace "default" { policy = "read" }`},
		{Name: "nodes", Rules: `{"node": {"policy": "write"}}`},
	})
	if err != nil {
		t.Fatalf("NewACL: %v", err)
	}
	if a.IsManagement() || !a.AllowNodeWrite() || !a.AllowNamespaceOperation("default", NamespaceCapabilityListJobs) {
		t.Error("NewACL did not compile both policies")
	}
	_, err = NewACL(false, []*Policy{{Name: "broken", Rules: `node { policy = "rw" }`}})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `policy "broken"`) ||
		!strings.Contains(err.Error(), "policy:1:17:") {
		t.Errorf("NewACL(broken) error = %v, want one naming the policy and position, wrapping ErrInvalid", err)
	}
}
