# countdash with both apps as docker containers: `make demo DRIVER=docker`
# runs it. The image is built locally (scripts/demo.sh): FROM scratch, its
# only file the static demo app (demoapp/cmd/demo-app), its entrypoint, so
# args are the demo app's. Each container joins its allocation's network
# namespace through the allocation's pause container; the sidecars are
# injected as usual (connect_proxy, or docker with connect { sidecar_driver
# = "docker" } on the servers).
variable "image" {
  type    = string
  default = "meshlet/demo-app:local"
}

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
      driver = "docker"

      config {
        image = var.image
        args  = ["counting", "-listen", "127.0.0.1:9001"]
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
      driver = "docker"

      config {
        image = var.image
        args = [
          "dashboard",
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
