# countdash: the classic connect demo with meshlet's own demo apps instead
# of docker images. The dashboard reaches count-api only through its
# sidecar's upstream listener on 127.0.0.1:8080; count-api listens on
# loopback inside its namespace and is reachable only through its sidecar.
job "countdash" {
  type = "service"

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

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }

  group "dashboard" {
    network {
      mode = "bridge"

      port "http" {
        static = 9002
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
        args = [
          "demo-app", "dashboard",
          "-listen", "0.0.0.0:${NOMAD_PORT_http}",
          "-counting-url", "http://${NOMAD_UPSTREAM_ADDR_count_api}",
        ]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
