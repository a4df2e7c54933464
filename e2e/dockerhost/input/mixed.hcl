# countdash with count-api as a container of the demo image and the
# dashboard as a raw_exec task: traffic between the two allocations crosses
# the bridge, which a system dockerd puts under FORWARD (br_netfilter) with
# a DROP policy.
variable "dashboard_port" {
  type = number
}

variable "image" {
  type    = string
  default = "meshlet-e2e/demo-app:latest"
}

job "countdash" {
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
      driver = "docker"

      config {
        image = var.image
        args  = ["counting", "-listen", "127.0.0.1:9001"]
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
