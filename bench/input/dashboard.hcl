# Lifecycle benchmark: the two-group dashboard job (the e2e one); the
# harness times `job run` until the dashboard shows a count from the api
# through the mesh.
variable "dashboard_port" {
  type    = number
  default = 9002
}

job "bench-dash" {
  datacenters = ["dc1"]

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

      connect {
        sidecar_service {
          proxy {
            upstreams {
              destination_name = "count-api"
              local_bind_port  = 8080
            }
          }
        }
      }
    }

    task "dashboard" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args = ["demo-app", "dashboard", "-listen", "0.0.0.0:9002",
        "-counting-url", "http://${NOMAD_UPSTREAM_ADDR_count_api}/"]
      }
    }
  }
}
