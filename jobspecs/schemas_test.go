package jobspecs

import (
	"strings"
	"testing"
)

// Blocks meshlet does not run are still checked against Nomad's schema: a
// typo is an error at its position, a correct block only warns.
func TestUnrunBlocksAreSchemaChecked(t *testing.T) {
	src := `job "j" {
  periodic {
    crn = "* * * * *"
  }
  group "g" {
    ephemeral_disk {
      size   = 300
      sizee  = 1
    }
    volume "data" {
      type = "host"
      mount_options {
        fs_typ = "ext4"
      }
    }
    affinity {
      attribute = "${node.datacenter}"
      wieght    = 50
    }
    scaling {
      min = 1
      max = 3
      policy {
        anything = "goes"
      }
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
      artifact {
        source  = "https://example.invalid/a.tgz"
        destinaton = "local/"
        options {
          checksum = "md5:d41d8cd98f00b204e9800998ecf8427e"
        }
      }
      vault {
        role    = "r"
        polcies = ["x"]
      }
      identity {
        aud = ["a"]
        tll = "1h"
      }
      consul {
        namspace = "x"
      }
    }
  }
}
`
	_, diags := Parse("j.hcl", []byte(src), nil)
	want := []string{
		`j.hcl:2:3: error: periodic is not supported by meshlet; Refused: a periodic job would run at once instead of on its schedule.`,
		`j.hcl:3:5: error: Unsupported argument; An argument named "crn" is not expected here. Did you mean "cron"?`,
		`j.hcl:8:7: error: Unsupported argument; An argument named "sizee" is not expected here. Did you mean "size"?`,
		`j.hcl:13:9: error: Unsupported argument; An argument named "fs_typ" is not expected here. Did you mean "fs_type"?`,
		`j.hcl:18:7: error: Unsupported argument; An argument named "wieght" is not expected here. Did you mean "weight"?`,
		`j.hcl:34:9: error: Unsupported argument; An argument named "destinaton" is not expected here. Did you mean "destination"?`,
		`j.hcl:41:9: error: Unsupported argument; An argument named "polcies" is not expected here. Did you mean "policies"?`,
		`j.hcl:45:9: error: Unsupported argument; An argument named "tll" is not expected here. Did you mean "ttl"?`,
		`j.hcl:48:9: error: Unsupported argument; An argument named "namspace" is not expected here. Did you mean "namespace"?`,
	}
	var got []string
	for _, d := range diags.Errs() {
		got = append(got, d.String())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(diags.Warnings()) == 0 {
		t.Error("no warning that the blocks have no effect")
	}
}

// The connect gateway tree and proxy.transparent_proxy are checked against
// Nomad's schema too.
func TestGatewayAndTransparentProxySchemas(t *testing.T) {
	body := `service {
        name = "ingress"
        port = "8080"
        connect {
          gateway {
            proxy {
              connect_timeout = "5s"
              envoy_gateway_bind_addresses "http" {
                address = "0.0.0.0"
                prot    = 8080
              }
            }
            ingress {
              listener {
                port     = 8080
                protocol = "http"
                service {
                  name  = "web"
                  hsots = ["*"]
                }
              }
            }
          }
        }
      }
      service {
        name = "api"
        port = "9090"
        connect {
          sidecar_service {
            proxy {
              transparent_proxy {
                exclude_uid = ["1"]
              }
            }
          }
        }
      }`
	_, diags := parseTask(t, "", "      "+body, nil)
	for _, want := range []string{
		`An argument named "prot" is not expected here. Did you mean "port"?`,
		`An argument named "hsots" is not expected here. Did you mean "hosts"?`,
		`An argument named "exclude_uid" is not expected here. Did you mean "exclude_uids"?`,
	} {
		if !strings.Contains(diags.Error(), want) {
			t.Errorf("diagnostics lack %q:\n%s", want, diags.Error())
		}
	}
}

// A parameterized job is refused in HCL as in JSON: meshlet would run it
// at once instead of waiting to be dispatched.
func TestParameterizedJobRefused(t *testing.T) {
	src := `job "j" {
  type = "batch"
  parameterized {
    payload = "required"
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
`
	_, diags := Parse("j.hcl", []byte(src), nil)
	errs := diags.Errs()
	if len(errs) != 1 || errs[0].String() != `j.hcl:3:3: error: parameterized is not supported by meshlet; Refused: a parameterized job would run at once instead of waiting to be dispatched.` {
		t.Fatalf("errors = %v, want the parameterized block refused at its position", errs)
	}
}
