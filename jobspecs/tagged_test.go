package jobspecs

import (
	"reflect"
	"strings"
	"testing"
)

func meshGatewayJob(tagged string) string {
	return "job \"j\" {\n  group \"g\" {\n    network {\n      mode = \"bridge\"\n    }\n    service {\n      name = \"m\"\n" +
		tagged + "\n      connect {\n        gateway {\n          mesh {}\n        }\n      }\n    }\n  }\n}\n"
}

// A service's tagged_addresses (block or map argument) decode as Nomad's
// map; a value that is not "ip" or "ip:port" is an error at its position.
func TestTaggedAddressesDecode(t *testing.T) {
	for _, tagged := range []string{
		"      tagged_addresses {\n        wan = \"127.0.9.1:9443\"\n        lan = \"10.0.0.1\"\n      }",
		"      tagged_addresses = { wan = \"127.0.9.1:9443\", lan = \"10.0.0.1\" }",
	} {
		job, diags := Parse("t.hcl", []byte(meshGatewayJob(tagged)), nil)
		if diags.HasErrors() || len(diags.Warnings()) > 0 {
			t.Fatalf("diagnostics: %v", diags)
		}
		want := map[string]string{"wan": "127.0.9.1:9443", "lan": "10.0.0.1"}
		if got := job.TaskGroups[0].Services[0].TaggedAddresses; !reflect.DeepEqual(got, want) {
			t.Fatalf("tagged addresses = %v, want %v", got, want)
		}
	}
	for bad, want := range map[string]string{
		"wan = \"gw.example\"":     `t.hcl:8:7: error: Invalid tagged address; tagged_addresses "wan": "gw.example" is not an IP address or IP:port.`,
		"wan = \"127.0.0.1:0\"":    `t.hcl:8:7: error: Invalid tagged address; tagged_addresses "wan": "127.0.0.1:0" has an invalid port.`,
		"wan = \"127.0.0.1:port\"": `has an invalid port`,
	} {
		src := meshGatewayJob("      tagged_addresses {\n        " + bad + "\n      }")
		_, diags := Parse("t.hcl", []byte(src), nil)
		if got := diags.Error(); !diags.HasErrors() || !strings.Contains(got, want) {
			t.Errorf("%s: diagnostics %q lack %q", bad, got, want)
		}
	}
}

// tagged_addresses on a service that is not a gateway is accepted with a
// warning: meshlet registers them for gateways only.
func TestTaggedAddressesWarnOffGateway(t *testing.T) {
	src := "job \"j\" {\n  group \"g\" {\n    service {\n      name = \"s\"\n      tagged_addresses { wan = \"127.0.0.1\" }\n    }\n" +
		"    task \"t\" {\n      driver = \"exec\"\n      config { command = \"x\" }\n    }\n  }\n}\n"
	_, diags := Parse("t.hcl", []byte(src), nil)
	if diags.HasErrors() || len(diags.Warnings()) != 1 || !strings.Contains(diags.Warnings()[0].Summary, "tagged_addresses has no effect") {
		t.Fatalf("diagnostics: %v", diags)
	}
}
