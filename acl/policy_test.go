package acl

import (
	"errors"
	"reflect"
	"testing"
)

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, rules, want string
	}{
		{"empty", "", "policy:1:1: empty policy: want at least one rule"},
		{"comments only", "# nothing\n\n", "policy:1:1: empty policy: want at least one rule"},
		{"empty json", "{}", "policy:1:1: empty policy: want at least one rule"},
		{"bad namespace policy", "# ops\nnamespace \"default\" {\n    policy = \"wrte\"\n}\n",
			`policy:3:14: invalid namespace policy "wrte": want deny, read, write or scale`},
		{"unknown capability", "namespace \"x\" {\n  capabilities = [\"read-job\", \"fly\"]\n}\n",
			`policy:2:31: unknown namespace capability "fly"`},
		{"capabilities not a list", "namespace \"x\" {\n  capabilities = \"read-job\"\n}\n",
			`policy:2:19: Invalid expression; A static list expression is required.`},
		{"bad namespace name", "namespace \"a b\" {\n  policy = \"read\"\n}\n",
			`policy:1:11: invalid namespace name "a b": want 1 to 128 letters, digits, '-' or '*'`},
		{"unknown block", "nodes {\n  policy = \"read\"\n}\n",
			`policy:1:1: Unsupported block type; Blocks of type "nodes" are not expected here. Did you mean "node"?`},
		{"unknown attribute", "node {\n  policy = \"read\"\n  mode = \"x\"\n}\n",
			`policy:3:3: Unsupported argument; An argument named "mode" is not expected here.`},
		{"unknown top-level attribute", "operator = \"read\"\n",
			`policy:1:1: Unsupported argument; An argument named "operator" is not expected here. Did you mean to define a block of type "operator"?`},
		{"missing policy", "agent {\n}\n",
			`policy:1:7: Missing required argument; The argument "policy" is required, but no definition was found.`},
		{"bad node policy", "node {\n  policy = \"scale\"\n}\n",
			`policy:2:12: invalid node policy "scale": want deny, read or write`},
		{"bad plugin policy", "plugin {\n  policy = \"scale\"\n}\n",
			`policy:2:12: invalid plugin policy "scale": want deny, read, list or write`},
		{"bad quota policy", "quota {\n  policy = \"list\"\n}\n",
			`policy:2:12: invalid quota policy "list": want deny, read or write`},
		{"bad host volume policy", "host_volume \"*\" {\n  policy = \"scale\"\n}\n",
			`policy:2:12: invalid host_volume policy "scale": want deny, read or write`},
		{"bad host volume capability", "host_volume \"*\" {\n  capabilities = [\"mount\"]\n}\n",
			`policy:2:19: unknown host_volume capability "mount"`},
		{"duplicate node", "node {\n  policy = \"read\"\n}\nnode {\n  policy = \"write\"\n}\n",
			`policy:4:1: duplicate node block: a policy has at most one (first at 1:1)`},
		{"bad service policy", "service \"web\" {\n  policy = \"list\"\n}\n",
			`policy:2:12: invalid service policy "list": want deny, read or write`},
		{"bad intentions", "service_prefix \"\" {\n  policy = \"read\"\n  intentions = \"all\"\n}\n",
			`policy:3:16: invalid service_prefix intentions "all": want deny, read or write`},
		{"service without label", "service {\n  policy = \"read\"\n}\n",
			`policy:1:9: Missing name for service; All service blocks must have 1 labels (name).`},
		{"bad mesh", "mesh = \"all\"\n", `policy:1:8: invalid mesh policy "all": want deny, read or write`},
		{"variable reference", "node {\n  policy = read\n}\n",
			`policy:2:12: Variables not allowed; Variables may not be used here.`},
		{"number policy", "node {\n  policy = 3\n}\n",
			`policy:2:12: invalid node policy "3": want deny, read or write`},
		{"list policy", "node {\n  policy = [\"read\"]\n}\n",
			`policy:2:12: Unsuitable value type; Unsuitable value: string required, but have tuple`},
		{"syntax", "node {\n  policy = \"read\"\n",
			`policy:1:6: Unclosed configuration block; There is no closing brace for this block before the end of the file. This may be caused by incorrect brace nesting elsewhere in this file.`},
		{"json bad policy", "{\n  \"node\": {\"policy\": \"rw\"}\n}",
			`policy:2:22: invalid node policy "rw": want deny, read or write`},
		{"json unknown block", `{"nodes": {"policy": "read"}}`,
			`policy:1:2: Extraneous JSON object property; No argument or block type is named "nodes". Did you mean "node"?`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse(tc.rules)
			if err == nil {
				t.Fatalf("Parse succeeded (%+v), want %q", p, tc.want)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("error:\n got %s\nwant %s", got, tc.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Line < 1 || pe.Column < 1 {
				t.Errorf("error %v is not a positioned *ParseError", err)
			}
		})
	}
}

const fullHCL = `
namespace "default" {
  policy       = "read"
  capabilities = ["submit-job"]
}
namespace {
  policy = "scale"
}
namespace "prod-*" {
  capabilities = ["deny"]
}
host_volume "certs-*" {
  policy = "read"
}
node {
  policy = "read"
}
agent {
  policy = "write"
}
operator {
  policy = "deny"
}
quota {
  policy = "read"
}
plugin {
  policy = "list"
}
mesh = "read"
service "web" {
  policy     = "write"
  intentions = "write"
}
service_prefix "" {
  policy = "read"
}
`

const fullJSON = `{
  "namespace": [
    {"default": {"policy": "read", "capabilities": ["submit-job"]}},
    {"default": {"policy": "scale"}},
    {"prod-*": {"capabilities": ["deny"]}}
  ],
  "host_volume": {"certs-*": {"policy": "read"}},
  "node": {"policy": "read"},
  "agent": {"policy": "write"},
  "operator": {"policy": "deny"},
  "quota": {"policy": "read"},
  "plugin": {"policy": "list"},
  "mesh": "read",
  "service": {"web": {"policy": "write", "intentions": "write"}},
  "service_prefix": {"": {"policy": "read"}}
}`

func TestParseFullPolicy(t *testing.T) {
	want := &PolicyRules{
		Namespaces: []*NamespaceRule{
			{Name: "default", Policy: "read", Capabilities: []string{"submit-job"}},
			{Name: "default", Policy: "scale"},
			{Name: "prod-*", Capabilities: []string{"deny"}},
		},
		HostVolumes:     []*HostVolumeRule{{Name: "certs-*", Policy: "read"}},
		Node:            "read",
		Agent:           "write",
		Operator:        "deny",
		Quota:           "read",
		Plugin:          "list",
		Mesh:            "read",
		Services:        []*ServiceRule{{Name: "web", Policy: "write", Intentions: "write"}},
		ServicePrefixes: []*ServiceRule{{Name: "", Policy: "read"}},
	}
	for name, rules := range map[string]string{"hcl": fullHCL, "json": fullJSON, "json after blanks": "\n  " + fullJSON} {
		t.Run(name, func(t *testing.T) {
			got, err := Parse(rules)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Parse:\n got %s\nwant %s", dump(got), dump(want))
			}
		})
	}
}

// dump renders rules for a failure message.
func dump(p *PolicyRules) string {
	s := ""
	for _, n := range p.Namespaces {
		s += "ns:" + n.Name + "/" + n.Policy + "/" + join(n.Capabilities) + " "
	}
	for _, h := range p.HostVolumes {
		s += "hv:" + h.Name + "/" + h.Policy + "/" + join(h.Capabilities) + " "
	}
	for _, r := range append(append([]*ServiceRule{}, p.Services...), p.ServicePrefixes...) {
		s += "svc:" + r.Name + "/" + r.Policy + "/" + r.Intentions + " "
	}
	return s + "node=" + p.Node + " agent=" + p.Agent + " operator=" + p.Operator +
		" quota=" + p.Quota + " plugin=" + p.Plugin + " mesh=" + p.Mesh
}

func join(vs []string) string {
	s := ""
	for i, v := range vs {
		if i > 0 {
			s += ","
		}
		s += v
	}
	return s
}

func TestParseAcceptsEveryDocumentedValue(t *testing.T) {
	for _, c := range namespaceCapabilities {
		if _, err := Parse(`namespace "default" { capabilities = ["` + c + `"] }`); err != nil {
			t.Errorf("capability %s: %v", c, err)
		}
	}
	for _, p := range []string{"deny", "read", "write", "scale"} {
		if _, err := Parse(`namespace "*" { policy = "` + p + `" }`); err != nil {
			t.Errorf("namespace policy %s: %v", p, err)
		}
	}
	for _, p := range []string{"deny", "read", "list", "write"} {
		if _, err := Parse(`plugin { policy = "` + p + `" }`); err != nil {
			t.Errorf("plugin policy %s: %v", p, err)
		}
	}
	for _, c := range hostVolumeCapabilities {
		if _, err := Parse(`host_volume "v" { capabilities = ["` + c + `"] }`); err != nil {
			t.Errorf("host volume capability %s: %v", c, err)
		}
	}
}
