package jobspecs

import (
	"reflect"
	"testing"
	"time"

	"github.com/meshlet/meshlet/structs"
)

// terminatingGroup is a bridge-mode group body whose only service is a
// terminating gateway with the given service blocks (its terminating
// block is on line 11, the services start on line 12).
func terminatingGroup(services string) string {
	return `network { mode = "bridge" }
service {
  name = "tgw"
  connect {
    gateway {
      proxy {
        connect_timeout = "2s"
      }
      terminating {
` + services + `
      }
    }
  }
}`
}

func TestTerminatingDecode(t *testing.T) {
	src := "job \"j\" {\n  group \"g\" {\n" + terminatingGroup(`service { name = "db" }
service {
  name = "api"
  ca_file = "/etc/ssl/ca.pem"
  cert_file = "local/cert.pem"
  key_file = "local/key.pem"
  sni = "api.example.com"
}`) + "\n  }\n}\n"
	job, diags := Parse("t.hcl", []byte(src), nil)
	if diags.HasErrors() || len(diags.Warnings()) > 0 {
		t.Fatalf("diagnostics: %v", diags)
	}
	Canonicalize(job)
	g := job.TaskGroups[0].Services[0].Connect.Gateway
	if g.Kind != "terminating" || g.Proxy == nil || *g.Proxy.ConnectTimeout != 2*time.Second || g.Ingress != nil {
		t.Fatalf("gateway = %+v", g)
	}
	want := &structs.ConsulTerminatingConfigEntry{Services: []*structs.ConsulLinkedService{
		{Name: "db"},
		{Name: "api", CAFile: "/etc/ssl/ca.pem", CertFile: "local/cert.pem", KeyFile: "local/key.pem", SNI: "api.example.com"},
	}}
	if !reflect.DeepEqual(g.Terminating, want) {
		t.Errorf("terminating:\n got %+v\nwant %+v", g.Terminating, want)
	}
	if _, err := Validate(job); err != nil {
		t.Errorf("canonical job does not validate: %v", err)
	}
}

func TestTerminatingValidation(t *testing.T) {
	tests := []struct {
		name, services string
		want           []string
	}{
		{"no service", ``, []string{
			`t.hcl:11:7: error: Missing terminating service; Consul Terminating Gateway requires at least one service.`}},
		{"names", "service { name = \"*\" }\nservice { sni = \"x\" }\nservice { name = \"ok\" }\nservice { name = \"db\" }\nservice { name = \"db\" }", []string{
			`t.hcl:12:18: error: Unsupported linked service name; A wildcard service name is not supported by meshlet yet; name each service.`,
			`t.hcl:13:1: error: Missing linked service name; Consul Linked Service requires Name.`,
			`t.hcl:16:18: error: Duplicate linked service; Service "db" is already linked to this gateway.`,
		}},
		{"tls", "service {\n  name = \"a\"\n  cert_file = \"c\"\n}\nservice {\n  name = \"b\"\n  sni = \"b.example\"\n}\nservice {\n  name = \"c\"\n  ca_file = \"ca\"\n  key_file = \"k\"\n}", []string{
			`t.hcl:14:15: error: Invalid linked service TLS; Consul Linked Service TLS requires CAFile.`,
			`t.hcl:14:15: error: Invalid linked service TLS; Consul Linked Service TLS Cert and Key must both be set.`,
			`t.hcl:18:9: error: Invalid linked service TLS; Consul Linked Service TLS SNI requires CAFile.`,
			`t.hcl:23:14: error: Invalid linked service TLS; Consul Linked Service TLS Cert and Key must both be set.`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assertDiags(t, parseGroup(t, terminatingGroup(tc.services)), tc.want)
		})
	}
}

func TestTerminatingNeedsBridge(t *testing.T) {
	body := "service {\n  name = \"tgw\"\n  connect {\n    gateway {\n      terminating {\n        service { name = \"db\" }\n      }\n    }\n  }\n}"
	assertDiags(t, parseGroup(t, body), nil) // host mode
	assertDiags(t, parseGroup(t, "network { mode = \"none\" }\n"+body), []string{
		`t.hcl:6:3: error: Terminating gateway requires bridge, cni or host networking; Service "tgw" is a terminating gateway, so group "g" needs at most one network block, with mode "bridge", "cni/<name>" or "host"; found network mode "none".`,
	})
}
