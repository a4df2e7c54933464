# An app that listens on 127.0.0.1 only, in bridge mode: its sidecar serves
# /health without mTLS on the mapped port "health" (an expose block), and
# the http check with expose = true reaches it through a port and expose
# path of its own.
job "expose" {
  datacenters = ["dc1"]

  group "api" {
    network {
      mode = "bridge"

      port "http" {
        to = 8080
      }

      port "health" {}
    }

    service {
      name = "api"
      port = "http"

      check {
        name     = "api-health"
        type     = "http"
        path     = "/health"
        expose   = true
        interval = "1s"
        timeout  = "1s"
      }

      connect {
        sidecar_service {
          proxy {
            expose {
              path {
                path            = "/health"
                protocol        = "http"
                local_path_port = 8080
                listener_port   = "health"
              }
            }
          }
        }
      }
    }

    task "api" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:8080", "-id", "api"]
      }
    }
  }
}
