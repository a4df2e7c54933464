# Two connect services for the ACL tests: count-api and count-dashboard,
# each with a built-in sidecar.
job "acl-mesh" {
  group "api" {
    network {
      mode = "bridge"
    }
    service {
      name = "count-api"
      port = "9001"
      connect {
        sidecar_service {}
      }
    }
    task "api" {
      driver = "raw_exec"
      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "counting", "-listen", "127.0.0.1:9001"]
      }
    }
  }

  group "dashboard" {
    network {
      mode = "bridge"
    }
    service {
      name = "count-dashboard"
      port = "9002"
      connect {
        sidecar_service {}
      }
    }
    task "dashboard" {
      driver = "raw_exec"
      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "counting", "-listen", "127.0.0.1:9002"]
      }
    }
  }
}
