package jobspecs

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/structs"
)

// parseGroup parses body inside group "g" of job "j"; the body starts on
// line 3.
func parseGroup(t *testing.T, body string) Diagnostics {
	t.Helper()
	src := "job \"j\" {\n  group \"g\" {\n" + body + "\n  }\n}\n"
	job, diags := Parse("t.hcl", []byte(src), nil)
	if job == nil {
		t.Fatalf("no job built: %v", diags)
	}
	return diags
}

const okTask = "task \"t\" {\n  driver = \"exec\"\n  config { command = \"x\" }\n}"

// bridge is a group body prefix with a bridge network (lines 3-5).
const bridge = "network {\n  mode = \"bridge\"\n}\n"

func TestValidationRules(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string
	}{
		{"count negative", "count = -1\n" + okTask,
			[]string{"t.hcl:3:9: error: Invalid count; Count -1 must not be negative."}},
		{"no task", "count = 1",
			[]string{`t.hcl:2:3: error: Missing task; Group "g" has no task; every group needs at least one task block.`}},
		{"duplicate task", okTask + "\n" + okTask,
			[]string{`t.hcl:7:1: error: Duplicate task name; Task name "t" is used more than once in group "g"; task names must be unique within a group.`}},
		{"missing driver", `task "t" {}`,
			[]string{`t.hcl:3:1: error: Missing driver; Task "t" needs a driver, e.g. driver = "raw_exec".`}},
		{"unknown driver warns", `task "t" { driver = "podman" }`,
			[]string{`t.hcl:3:21: warning: Driver "podman" is not built into meshlet; meshlet ships the exec, raw_exec and docker drivers; placement fails with "driver podman not available on node" unless a podman driver plugin is installed.`}},
		{"docker config", "task \"t\" {\n  driver = \"docker\"\n  config {\n    image = \"busybox:1\"\n    args = [\"-c\", 1]\n    ports = [\"http\"]\n    network_mode = \"host\"\n" +
			"    cap_add = [\"net_raw\"]\n    mount {\n      type = \"tmpfs\"\n      target = \"/t\"\n    }\n    logging {\n      type = \"json-file\"\n    }\n  }\n}", nil},
		{"docker bad config", "task \"t\" {\n  driver = \"docker\"\n  config {\n    command = \"x\"\n    imagee = \"busybox\"\n    network_mode = \"bridge\"\n    group_add = [\"x\"]\n    cap_add = \"kill\"\n    privileged = \"yes\"\n  }\n}", []string{
			`t.hcl:5:3: error: Missing driver config image; Task "t": the docker driver needs config { image = "..." }.`,
			`t.hcl:5:3: error: Invalid driver config; Task "t": config network_mode "bridge" is not supported by meshlet's docker driver; use "none" or "host", or leave it unset.`,
			`t.hcl:5:3: error: Invalid driver config; Task "t": config privileged must be a bool, not a string.`,
			`t.hcl:5:3: error: Invalid driver config; Task "t": config cap_add must be a list of strings, not a string.`,
			`t.hcl:5:3: error: config group_add is not supported by meshlet's docker driver; Task "t": remove it; the driver refuses keys it does not implement.`,
			`t.hcl:5:3: error: Unknown docker config key "imagee"; The docker driver takes args, auth, cap_add, cap_drop, command, cpuset_cpus, devices, dns_options, dns_search_domains, dns_servers, entrypoint, extra_hosts, force_pull, healthchecks, hostname, image, image_pull_timeout, init, interactive, ipc_mode, labels, logging, mount, network_mode, pid_mode, pids_limit, ports, privileged, readonly_rootfs, runtime, security_opt, shm_size, sysctl, tty, ulimit, userns_mode, uts_mode, volumes and work_dir. Did you mean "image"?`,
		}},
		{"docker in a bridge group", bridge + "task \"t\" {\n  driver = \"docker\"\n  config { image = \"busybox\" }\n}", nil},
		{"docker bad addresses", "task \"t\" {\n  driver = \"docker\"\n  config {\n    image = \"busybox\"\n    dns_servers = [\"10.0.0.1\", \"dns.example\", \"${attr.x}\"]\n    extra_hosts = [\"db:10.0.0.2\", \"v6:2001:db8::1\", \"db=10.0.0.3\"]\n  }\n}", []string{
			`t.hcl:5:3: warning: Invalid dns server; Task "t": config dns_servers: "dns.example" is not an IP address; the driver drops it (as Nomad does).`,
			`t.hcl:5:3: error: Invalid driver config; Task "t": config extra_hosts: "db=10.0.0.3" must be "hostname:IP".`,
		}},
		{"docker modes and limits", "task \"t\" {\n  driver = \"docker\"\n  config {\n    image = \"busybox\"\n    uts_mode = \"host\"\n    userns_mode = \"host\"\n    init = true\n    pids_limit = 64\n  }\n}", nil},
		{"docker bad modes and limits", "task \"t\" {\n  driver = \"docker\"\n  config {\n    image = \"busybox\"\n    uts_mode = \"private\"\n    userns_mode = 1\n    init = \"yes\"\n    pids_limit = -1\n    cpuset_cpus = \"0-1\"\n  }\n}", []string{
			`t.hcl:5:3: error: Invalid driver config; Task "t": config userns_mode must be a string, not a number.`,
			`t.hcl:5:3: error: Invalid driver config; Task "t": config init must be a bool, not a string.`,
			`t.hcl:5:3: error: Invalid driver config; Task "t": config uts_mode must be "host" or unset, not "private".`,
			`t.hcl:5:3: error: Invalid driver config; Task "t": config pids_limit must be a whole number, not negative, got -1.`,
			`t.hcl:5:3: warning: Ignored docker config cpuset_cpus; Task "t": cpuset_cpus is not supported (as in Nomad, which ignores it since 0.12); the driver ignores it.`,
		}},
		{"docker hostname in a bridge group", bridge + "task \"t\" {\n  driver = \"docker\"\n  config {\n    image = \"busybox\"\n    hostname = \"h\"\n  }\n}", []string{
			`t.hcl:8:3: error: Invalid driver config; Task "t": config hostname cannot be set on a docker task in a "bridge" group, whose network namespace it joins; set the group's network { hostname } instead.`,
		}},
		{"connect_proxy driver is built in", "task \"t\" {\n  driver = \"connect_proxy\"\n  config { proxy_id = \"x\" }\n}", nil},
		{"exec capabilities and modes", "task \"t\" {\n  driver = \"exec\"\n  config {\n    command = \"x\"\n    cap_add = [\"net_raw\"]\n    cap_drop = [\"all\"]\n    pid_mode = \"host\"\n    ipc_mode = \"private\"\n  }\n}", nil},
		{"exec bad capabilities and modes", "task \"t\" {\n  driver = \"exec\"\n  config {\n    command = \"x\"\n    cap_add = \"net_raw\"\n    cap_drop = [1]\n    pid_mode = \"shared\"\n  }\n}", []string{
			`t.hcl:5:3: error: Invalid driver config; Task "t": config cap_add must be a list of strings, not a string.`,
			`t.hcl:5:3: error: Invalid driver config; Task "t": config cap_drop[0] must be a string, not a number.`,
			`t.hcl:5:3: error: Invalid driver config; Task "t": config pid_mode must be "private" or "host", not "shared".`,
		}},
		{"lifecycle hook", "task \"t\" {\n  driver = \"exec\"\n  lifecycle { hook = \"prerun\" }\n  config { command = \"x\" }\n}",
			[]string{`t.hcl:5:22: error: Invalid lifecycle hook; Hook "prerun" is not valid; use "prestart", "poststart" or "poststop".`}},
		{"restart", "restart {\n  mode = \"never\"\n  attempts = -1\n}\n" + okTask, []string{
			`t.hcl:4:10: error: Invalid restart mode; Restart mode "never" is not valid; use "fail" or "delay".`,
			`t.hcl:5:14: error: Invalid restart attempts; Attempts -1 must not be negative.`,
		}},
		{"restart attempts do not fit", "restart {\n  attempts = 10\n  delay = \"1m\"\n  interval = \"5m\"\n}\n" + okTask, []string{
			`t.hcl:6:14: error: Restart attempts do not fit in interval; 10 attempts with delay 1m0s cannot fit in interval 5m0s; raise interval, or lower attempts or delay.`,
		}},
		{"restart interval too short", "restart { interval = \"1s\" }\n" + okTask, []string{
			`t.hcl:3:22: error: Invalid restart interval; Interval 1s must be at least 5s.`,
		}},
		{"restart delay mode without attempts", "restart {\n  attempts = 0\n  mode = \"delay\"\n}\n" + okTask, []string{
			`t.hcl:4:14: error: Ambiguous restart policy; mode = "delay" with attempts = 0 is ambiguous; set attempts above 0, or mode = "fail" to fail at the first exit.`,
		}},
		{"restart without attempts fails at once", "restart {\n  attempts = 0\n  mode = \"fail\"\n  interval = \"5s\"\n}\n" + okTask, nil},
		{"a task's restart block is not held to the group rules (as Nomad)", "restart { mode = \"delay\" }\n" +
			"task \"t\" {\n  driver = \"exec\"\n  config { command = \"x\" }\n  restart { attempts = 0 }\n}", nil},
		{"inherited restart reported once", "restart { interval = \"1s\" }\n" +
			"task \"t\" {\n  driver = \"exec\"\n  config { command = \"x\" }\n  restart { delay = \"1s\" }\n}", []string{
			`t.hcl:3:22: error: Invalid restart interval; Interval 1s must be at least 5s.`,
		}},
		{"two networks", bridge + "network {}\n" + okTask,
			[]string{`t.hcl:6:1: error: Too many network blocks; Group "g" has 2 network blocks; a group may have at most one.`}},
		{"network mode", "network { mode = \"cni/\" }\n" + okTask,
			[]string{`t.hcl:3:18: error: Invalid network mode; Network mode "cni/" is not valid; use "host", "bridge", "none" or "cni/<name>".`}},
		{"ports", "network {\n  port \"a\" { static = 70000 }\n  port \"b\" { to = 65536 }\n  port \"a\" { to = -1 }\n}\n" + okTask, []string{
			`t.hcl:4:23: error: Invalid port; Port "a": static 70000 is out of range 0-65535.`,
			`t.hcl:5:19: error: Invalid port; Port "b": to 65536 is out of range 0-65535 (-1 means the same as the host port).`,
			`t.hcl:6:3: error: Duplicate port label; Port label "a" is used more than once in group "g"; port labels must be unique within a group.`,
		}},
		{"connect needs bridge", "network { mode = \"host\" }\nservice {\n  name = \"s\"\n  connect {\n    sidecar_service {}\n  }\n}\n" + okTask,
			[]string{`t.hcl:6:3: error: Connect requires bridge networking; Service "s" has a connect sidecar, so group "g" needs exactly one network block with mode "bridge" or "cni/<name>"; found network mode "host".`}},
		{"connect with cni is fine", "network { mode = \"cni/mesh\" }\nservice {\n  name = \"s\"\n  connect {\n    sidecar_service {}\n  }\n}\n" + okTask, nil},
		{"connect name", bridge + "service {\n  name = \"web.api\"\n  connect {\n    sidecar_service {}\n  }\n}\n" + okTask,
			[]string{`t.hcl:7:10: error: Invalid connect service name; Service name "web.api" must be valid per RFC 1123 and can contain only alphanumeric characters or dashes, at most 63 characters (a connect service name must also be lowercase).`}},
		{"connect name too long", bridge + "service {\n  name = \"" + strings.Repeat("a", 64) + "\"\n  connect {\n    sidecar_service {}\n  }\n}\n" + okTask,
			[]string{`t.hcl:7:10: error: Invalid connect service name; Service name "` + strings.Repeat("a", 64) + `" must be valid per RFC 1123 and can contain only alphanumeric characters or dashes, at most 63 characters (a connect service name must also be lowercase).`}},
		{"upstreams", bridge + `service {
  name = "s"
  connect {
    sidecar_service {
      proxy {
        upstreams { local_bind_port = 1000 }
        upstreams {
          destination_name = "b"
          local_bind_port = 0
        }
      }
    }
  }
}
service {
  name = "s2"
  connect {
    sidecar_service {
      proxy {
        upstreams {
          destination_name = "c"
          local_bind_port  = 1000
        }
      }
    }
  }
}
` + okTask, []string{
			`t.hcl:11:9: error: Missing upstream destination_name; Every upstreams block needs destination_name.`,
			`t.hcl:14:29: error: Invalid local_bind_port; Upstream "b": local_bind_port 0 is out of range 1-65535.`,
			`t.hcl:27:30: error: Duplicate local_bind_port; local_bind_port 1000 of upstream "c" (service "s2") is already used by upstream #1 (service "s") in group "g"; each upstream needs its own port.`,
		}},
		{"service port", "network {\n  port \"http\" {}\n}\nservice {\n  name = \"a\"\n  port = \"htp\"\n}\nservice {\n  name = \"b\"\n  port = 70000\n}\nservice {\n  name = \"c\"\n  port = 8080\n}\n" + okTask, []string{
			`t.hcl:8:10: error: Unknown service port; Service "a" port "htp" is neither a port label of group "g" (labels: http) nor a port number 1-65535.`,
			`t.hcl:12:10: error: Unknown service port; Service "b" port "70000" is neither a port label of group "g" (labels: http) nor a port number 1-65535.`,
		}},
		{"checks", `service {
  name = "s"
  address_mode = "nat"
  check {
    type = "http"
    interval = "0s"
    timeout = "1s"
  }
  check {
    type = "script"
    interval = "5s"
    timeout = "100ms"
  }
  check {
    type = "tcp"
    port = "nope"
    expose = true
    interval = "5s"
    timeout = "1s"
  }
  check {
    type = "udp"
    address_mode = "auto"
    interval = "5s"
    timeout = "1s"
  }
}
` + okTask, []string{
			`t.hcl:5:18: error: Invalid address_mode; address_mode "nat" is not valid; use "auto", "host", "driver" or "alloc".`,
			`t.hcl:6:3: error: Missing check path; An http check needs a path, e.g. path = "/health".`,
			`t.hcl:8:16: error: Invalid check interval; Check interval 0s must be at least 1s.`,
			`t.hcl:11:3: error: Missing check command; A script check needs a command.`,
			`t.hcl:11:3: error: Missing check task; Service [g]->s or Check service: "s" check must specify task parameter`,
			`t.hcl:14:15: error: Invalid check timeout; Check timeout 100ms must be at least 1s.`,
			`t.hcl:18:12: error: Unknown check port; Check port "nope" is neither a port label of the group (it has no port labels) nor a port number 1-65535.`,
			`t.hcl:19:14: error: Invalid exposed check; expose may only be set on HTTP or gRPC checks, not "tcp".`,
			`t.hcl:19:14: error: Invalid exposed check; expose = true needs a connect sidecar_service on service "s".`,
			`t.hcl:24:12: error: Invalid check type; Check type "udp" is not valid; use "http", "tcp", "grpc" or "script".`,
			`t.hcl:25:20: error: Invalid address_mode; Check address_mode "auto" is not valid; use "host", "driver" or "alloc".`,
		}},
		{"native and gateway warn", "service {\n  name = \"n\"\n  port = 9090\n  connect { native = true }\n}\nservice {\n  name = \"gw\"\n  connect {\n    gateway {\n      mesh {}\n    }\n  }\n}\n" + okTask, []string{
			`t.hcl:6:22: warning: connect native is not supported by meshlet yet`,
		}},
		{"task service with connect", bridge + "task \"t\" {\n  driver = \"exec\"\n  service {\n    name = \"s\"\n    connect {\n    sidecar_service {}\n  }\n  }\n  config { command = \"x\" }\n}",
			[]string{`t.hcl:10:5: error: Connect on a task service; connect is only allowed in group-level service blocks; move the service into the group.`}},
		{"constraint operator", "constraint {\n  attribute = \"${attr.x}\"\n  operator = \"~\"\n  value = \"1\"\n}\nconstraint {\n  operator = \">\"\n}\n" + okTask, []string{
			`t.hcl:5:14: error: Invalid constraint operator; Operator "~" is not valid; use one of =, ==, is, !=, not, >, >=, <, <=, distinct_hosts, distinct_property, regexp, set_contains, set_contains_all, set_contains_any, version, semver, is_set, is_not_set.`,
			`t.hcl:8:1: error: Missing constraint attribute; Operator ">" needs an attribute, e.g. attribute = "${attr.kernel.name}".`,
		}},
		{"version constraint values", "constraint {\n  attribute = \"${attr.kernel.version}\"\n  operator = \"version\"\n  value = \">= five\"\n}\n" +
			"constraint {\n  attribute = \"${attr.kernel.version}\"\n  semver = \"~> 1.2\"\n}\n" +
			"constraint {\n  attribute = \"${attr.kernel.version}\"\n  semver = \">= 1.2.0, < 2.0.0\"\n}\n" +
			"constraint {\n  attribute = \"${attr.kernel.version}\"\n  version = \"${meta.min}\"\n}\n" + okTask, []string{
			`t.hcl:6:11: error: Invalid constraint value; Operator "version" needs a valid value: invalid version constraint: malformed constraint: >= five.`,
			`t.hcl:10:12: error: Invalid constraint value; Operator "semver" needs a valid value: invalid version constraint: "~> 1.2": malformed version: ~> 1.2.`,
		}},
		{"resources and logs", "task \"t\" {\n  driver = \"exec\"\n  resources {\n    cpu = 100\n    cores = 1\n    memory = 5\n  }\n  logs { max_files = 0 }\n  config { command = \"x\" }\n}", []string{
			`t.hcl:7:13: error: Conflicting cpu and cores; Set either cpu (MHz) or cores, not both.`,
			`t.hcl:8:14: error: Invalid memory; memory 5 MB must be at least 10.`,
			`t.hcl:10:22: error: Invalid max_files; max_files 0 must be at least 1.`,
		}},
		{"count zero is fine", "count = 0\n" + okTask, nil},
		{"unsupported block parsed", "ephemeral_disk {\n  size = var.nope\n}\n" + okTask, []string{
			`t.hcl:3:1: warning: ephemeral_disk is not supported by meshlet yet; ignored`,
			`t.hcl:4:13: error: Unsupported attribute; This object does not have an attribute named "nope".`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assertDiags(t, parseGroup(t, tc.body), tc.want)
		})
	}
}

func TestJobLevelRules(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string
	}{
		{"sysbatch", "job \"j\" {\n  type = \"sysbatch\"\n  group \"g\" { " + "\n    " + okTask + "\n  }\n}", nil},
		{"system count and reschedule", "job \"j\" {\n  type = \"system\"\n  group \"g\" {\n    count = 2\n    reschedule { attempts = 1 }\n    spread { attribute = \"${node.datacenter}\" }\n    " + okTask + "\n  }\n}", []string{
			`t.hcl:4:13: error: Invalid count; Job task group g has count 2. Only count of 1 is supported with system scheduler.`,
			`t.hcl:5:5: error: Invalid reschedule policy; System jobs should not have a reschedule policy.`,
			`t.hcl:6:5: error: Invalid spread; System jobs may not have a spread block.`,
		}},
		{"bad type", "job \"j\" {\n  type = \"cron\"\n  group \"g\" { " + "\n    " + okTask + "\n  }\n}",
			[]string{`t.hcl:2:10: error: Invalid job type; Job type "cron" is not valid; use "service", "batch", "system" or "sysbatch".`}},
		{"priority", "job \"j\" {\n  priority = 0\n  group \"g\" { " + "\n    " + okTask + "\n  }\n}", nil},
		{"duplicate group", "job \"j\" {\n  group \"g\" {\n    " + okTask + "\n  }\n  group \"g\" {\n    " + okTask + "\n  }\n}",
			[]string{`t.hcl:8:3: error: Duplicate group name; Group name "g" is used more than once; group names must be unique within a job.`}},
		{"empty name", "job \"\" {\n  group \"g\" { " + "\n    " + okTask + "\n  }\n}",
			[]string{`t.hcl:1:5: error: Missing job name; A job needs a name: job "name" { ... }.`}},
		{"name with space", "job \"a b\" {\n  group \"g\" { " + "\n    " + okTask + "\n  }\n}",
			[]string{`t.hcl:1:5: error: Invalid job ID; Job ID "a b" must not contain spaces or control characters.`}},
		{"everything reported", "job \"j\" {\n  type = \"cron\"\n  priority = 101\n  group \"g\" {\n    task \"t\" {}\n  }\n  group \"h\" {}\n}", []string{
			`t.hcl:2:10: error: Invalid job type; Job type "cron" is not valid; use "service", "batch", "system" or "sysbatch".`,
			`t.hcl:3:14: error: Invalid priority; Priority 101 is out of range 1-100.`,
			`t.hcl:5:5: error: Missing driver; Task "t" needs a driver, e.g. driver = "raw_exec".`,
			`t.hcl:7:3: error: Missing task; Group "h" has no task; every group needs at least one task block.`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := Parse("t.hcl", []byte(tc.src), nil)
			assertDiags(t, diags, tc.want)
		})
	}
}

// TestValidateJSON checks jobs as the HTTP API receives them: no positions,
// a path in each line, ErrInvalidJob.
func TestValidateJSON(t *testing.T) {
	tests := []struct {
		name         string
		json         string
		wantErr      []string
		wantWarnings []string
	}{
		{"valid", `{"ID":"x","Name":"x","Type":"service","TaskGroups":[{"Name":"g","Count":1,
			"Tasks":[{"Name":"t","Driver":"raw_exec","Config":{"command":"/bin/true"}}]}]}`, nil, nil},
		{"many problems", `{"ID":"x","Name":"x","Type":"cron","TaskGroups":[
			{"Name":"g","Count":-2,"Networks":[{"Mode":"host","ReservedPorts":[{"Label":"http","Value":70000}]}],
			 "Services":[{"Name":"Web","PortLabel":"http","Connect":{"SidecarService":{"Proxy":{"Upstreams":[
			   {"DestinationName":"a","LocalBindPort":8080},{"DestinationName":"b","LocalBindPort":8080}]}}}}],
			 "Tasks":[{"Name":"t","Driver":"podman","Templates":[{"DestPath":"x"}]},{"Name":"t"}]},
			{"Name":"g","Tasks":[]}]}`,
			[]string{
				`Invalid job type; Job type "cron" is not valid; use "service", "batch", "system" or "sysbatch".`,
				`group "g": Invalid count; Count -2 must not be negative.`,
				`group "g": network[0]: reserved_port "http": Invalid port; Port "http": static 70000 is out of range 0-65535.`,
				`group "g": task "t": template[0]: Missing template source; A template needs data (an inline template) or source (a template file in the task directory).`,
				`group "g": task "t": Duplicate task name; Task name "t" is used more than once in group "g"; task names must be unique within a group.`,
				`group "g": task "t": Missing driver; Task "t" needs a driver, e.g. driver = "raw_exec".`,
				`group "g": service "Web": Invalid connect service name; Consul Connect service name "Web" must not contain uppercase characters.`,
				`group "g": service "Web": connect: Connect requires bridge networking; Service "Web" has a connect sidecar, so group "g" needs exactly one network block with mode "bridge" or "cni/<name>"; found network mode "host".`,
				`group "g": service "Web": connect: sidecar_service: proxy: upstream "b": Duplicate local_bind_port; local_bind_port 8080 of upstream "b" (service "Web") is already used by upstream "a" (service "Web") in group "g"; each upstream needs its own port.`,
				`group "g": Duplicate group name; Group name "g" is used more than once; group names must be unique within a job.`,
				`group "g": Missing task; Group "g" has no task; every group needs at least one task block.`,
			},
			[]string{
				`group "g": task "t": Driver "podman" is not built into meshlet; meshlet ships the exec, raw_exec and docker drivers; placement fails with "driver podman not available on node" unless a podman driver plugin is installed.`,
			}},
		{"restart policies", `{"ID":"x","Type":"service","TaskGroups":[
			{"Name":"g","RestartPolicy":{"Attempts":200},"Tasks":[{"Name":"t","Driver":"raw_exec","Config":{"command":"/bin/true"}}]},
			{"Name":"h","Tasks":[{"Name":"t","Driver":"raw_exec","Config":{"command":"/bin/true"},"RestartPolicy":{"Interval":3000000000}}]}]}`, []string{
			`group "g": restart: Restart attempts do not fit in interval; 200 attempts with delay 15s cannot fit in interval 30m0s; raise interval, or lower attempts or delay.`,
		}, nil},
		{"nulls", `{"ID":"x","TaskGroups":[null,{"Name":"g","Tasks":[null],"Services":[null]}]}`, []string{
			`group[0]: Missing group; The group is null.`,
			`group "g": task[0]: Missing task; The task is null.`,
			`group "g": service[0]: Missing service; The service is null.`,
		}, nil},
		{"nulls next to a proxy kind", `{"ID":"x","TaskGroups":[{"Name":"g","Services":[null],
			"Tasks":[null,{"Name":"p","Driver":"raw_exec","Config":{"command":"/bin/true"},"Kind":"connect-proxy:x"}]}]}`, []string{
			`group "g": task[0]: Missing task; The task is null.`,
			`group "g": service[0]: Missing service; The service is null.`,
			`group "g": task "p": Invalid task kind; Task "p" has kind "connect-proxy:x", but group "g" has no connect service "x" for it to be the proxy of (or another task already is); meshlet sets this kind on the proxy tasks it injects.`,
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var job structs.Job
			if err := json.Unmarshal([]byte(tc.json), &job); err != nil {
				t.Fatal(err)
			}
			warnings, err := Validate(&job)
			if !reflect.DeepEqual(warnings, tc.wantWarnings) {
				t.Errorf("warnings:\n got %q\nwant %q", warnings, tc.wantWarnings)
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidJob) {
				t.Fatalf("error %v does not wrap ErrInvalidJob", err)
			}
			lines := strings.Split(err.Error(), "\n")
			if lines[0] != "invalid job:" || !reflect.DeepEqual(lines[1:], tc.wantErr) {
				t.Errorf("error lines:\n got %q\nwant %q", lines, append([]string{"invalid job:"}, tc.wantErr...))
			}
		})
	}
	if _, err := Validate(nil); !errors.Is(err, ErrInvalidJob) {
		t.Errorf("Validate(nil) = %v", err)
	}
}

// TestValidateAgreesWithParse: a parsed job re-validated through JSON (as
// the API would receive it) gives the same errors, without positions.
func TestValidateAgreesWithParse(t *testing.T) {
	src := "job \"j\" {\n  group \"g\" {\n    network { mode = \"host\" }\n    service {\n      name = \"s\"\n      connect {\n    sidecar_service {}\n  }\n    }\n    task \"t\" {}\n  }\n}\n"
	job, diags := Parse("t.hcl", []byte(src), nil)
	if job == nil {
		t.Fatal(diags)
	}
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON structs.Job
	if err := json.Unmarshal(b, &fromJSON); err != nil {
		t.Fatal(err)
	}
	_, verr := Validate(&fromJSON)
	if verr == nil {
		t.Fatal("Validate found nothing")
	}
	// Parse sorts by position, Validate reports in rule order: compare the
	// sets of findings.
	var fromParse, fromValidate []string
	for _, d := range diags.Errs() {
		fromParse = append(fromParse, d.Summary)
	}
	for _, line := range strings.Split(verr.Error(), "\n")[1:] {
		for _, d := range diags.Errs() {
			if strings.Contains(line, ": "+d.Summary+"; "+d.Detail) {
				fromValidate = append(fromValidate, d.Summary)
			}
		}
	}
	slices.Sort(fromParse)
	slices.Sort(fromValidate)
	if len(fromParse) != 2 || !slices.Equal(fromParse, fromValidate) {
		t.Errorf("Parse and Validate disagree:\n%s\n%v", diags.Error(), verr)
	}
}
