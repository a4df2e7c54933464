# Lifecycle baseline: the dashboard job of dashboard.hcl without connect
# (same groups, same bridge networks, no sidecars). The dashboard has no
# route to the api here: the harness times `job run` until the dashboard
# answers on its static port.
variable "dashboard_port" {
  type    = number
  default = 9002
}

job "bench-dash-plain" {
  datacenters = ["dc1"]

  group "api" {
    network {
      mode = "bridge"
    }

    service {
      name = "count-api"
      port = "9001"
    }

    task "web" {
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

      port "http" {
        static = var.dashboard_port
        to     = 9002
      }
    }

    service {
      name = "count-dashboard"
      port = "http"
    }

    task "dashboard" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args = ["demo-app", "dashboard", "-listen", "0.0.0.0:9002",
        "-counting-url", "http://127.0.0.1:8080/"]
      }
    }
  }
}
