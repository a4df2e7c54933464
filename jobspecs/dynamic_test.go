package jobspecs

import (
	"strings"
	"testing"
)

// dynamic blocks expand at every level Nomad's real jobspecs use them:
// groups (labels), ports (labels), services holding connect, upstreams
// with an iterator (nested in a dynamic service), env; expressions see the
// iterator and the variables, and runtime references stay text.
func TestDynamicBlocks(t *testing.T) {
	src := `
variable "groups" {
  default = {
    api  = { port = 9001, upstreams = ["db", "cache"] }
    web  = { port = 9002, upstreams = [] }
  }
}
job "shop" {
  dynamic "group" {
    for_each = var.groups
    labels   = [group.key]
    content {
      network {
        mode = "bridge"
        dynamic "port" {
          for_each = ["http", "admin"]
          labels   = [port.value]
          content {
            to = port.value == "http" ? group.value.port : -1
          }
        }
      }
      dynamic "service" {
        for_each = [group.key]
        iterator = svc
        content {
          name = "${svc.value}-svc"
          port = "http"
          connect {
            sidecar_service {
              proxy {
                dynamic "upstreams" {
                  for_each = group.value.upstreams
                  iterator = up
                  content {
                    destination_name = up.value
                    local_bind_port  = 8000 + up.key
                  }
                }
              }
            }
          }
        }
      }
      task "app" {
        driver = "raw_exec"
        config {
          command = "/bin/true"
        }
        dynamic "env" {
          for_each = { GROUP = group.key }
          content {
            NAME  = env.key
            ALLOC = "${NOMAD_ALLOC_ID}"
          }
        }
      }
    }
  }
}
`
	job, diags := Parse("shop.hcl", []byte(src), nil)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	if len(job.TaskGroups) != 2 {
		t.Fatalf("groups = %d, want 2", len(job.TaskGroups))
	}
	api := job.TaskGroups[0]
	if api.Name != "api" || len(api.Networks) != 1 || len(api.Networks[0].DynamicPorts) != 2 {
		t.Fatalf("api group = %+v", api)
	}
	ports := api.Networks[0].DynamicPorts
	if ports[0].Label != "http" || ports[0].To != 9001 || ports[1].Label != "admin" || ports[1].To != -1 {
		t.Errorf("api ports = %+v", ports)
	}
	svc := api.Services[0]
	if svc.Name != "api-svc" {
		t.Errorf("service name = %q", svc.Name)
	}
	ups := svc.Connect.SidecarService.Proxy.Upstreams
	if len(ups) != 2 || ups[0].DestinationName != "db" || ups[0].LocalBindPort != 8000 || ups[1].DestinationName != "cache" || ups[1].LocalBindPort != 8001 {
		t.Errorf("api upstreams = %+v", ups)
	}
	if env := api.Tasks[0].Env; env["NAME"] != "GROUP" || env["ALLOC"] != "${NOMAD_ALLOC_ID}" {
		t.Errorf("api env = %v", env)
	}
	if web := job.TaskGroups[1]; web.Name != "web" || len(web.Services[0].Connect.SidecarService.Proxy.Upstreams) != 0 {
		t.Errorf("web group = %+v", web)
	}
}

// Bad dynamic blocks are errors at their position.
func TestDynamicBlockErrors(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`dynamic "nope" {
        for_each = [1]
        content {}
      }`, `A dynamic block cannot generate blocks of type "nope" here.`},
		{`dynamic "service" {
        content {}
      }`, `dynamic "service" needs for_each and one content block.`},
		{`dynamic "service" {
        for_each = "x"
        content {}
      }`, `for_each of dynamic "service" must be a known collection, not string.`},
		{`dynamic "service" {
        for_each = range(1000)
        content {
          dynamic "check" {
            for_each = range(1000)
            content {
              type = "tcp"
            }
          }
        }
      }`, `Evaluating the jobspec costs more than`},
		{`dynamic "service" {
        for_each = [1]
        labels   = ["a", {}]
        content {}
      }`, `labels must be a list of strings.`},
		{`dynamic "service" {
        for_each = [1]
        iterator = a.b
        content {}
      }`, `iterator must be a single name`},
		{`dynamic "service" {
        for_each = [1, 2, 3]
        content {
          nmae = "x"
        }
      }`, `An argument named "nmae" is not expected here.`},
	} {
		_, diags := parseTask(t, "", "      "+c.body, nil)
		if n := strings.Count(diags.Error(), c.want); n != 1 {
			t.Errorf("%.40q: %q reported %d times, want once: %v", c.body, c.want, n, diags)
		}
		if !diags.HasErrors() || !strings.Contains(diags.Error(), c.want) {
			t.Errorf("%.40q: %v, want an error with %q", c.body, diags, c.want)
		}
	}
}

// A dynamic block inside a free-form body (a task's config, as docker's
// mount blocks are often written) generates the blocks there too, and one
// inside a block meshlet does not run is checked as the block it makes.
func TestDynamicInFreeformBodies(t *testing.T) {
	body := `config {
        command = "/bin/true"
        dynamic "mount" {
          for_each = ["a", "b"]
          content {
            target = "/mnt/${mount.value}"
          }
        }
      }
      vault {
        dynamic "identity" {
          for_each = [1]
          content {}
        }
      }`
	task, diags := parseTask(t, "", "      "+body, nil)
	mounts, _ := task.Config["mount"].([]any)
	if len(mounts) != 2 || mounts[1].(map[string]any)["target"] != "/mnt/b" {
		t.Errorf("config mounts = %#v (%v)", task.Config["mount"], diags)
	}
	if !strings.Contains(diags.Error(), `Blocks of type "identity" are not expected here.`) {
		t.Errorf("a dynamic block making an unknown block inside vault: %v, want an error", diags)
	}
}
