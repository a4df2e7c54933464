# Expose paths, both forms: an http and a grpc check with expose = true
# (each gets a dynamic port and an expose path through the sidecar; a grpc
# check's is /grpc.health.v1.Health/Check over HTTP/2), and an
# explicit expose block serving /metrics on its own mapped port. The app
# listens on 127.0.0.1 only; the sidecar serves these paths without mTLS.
job "expose" {
  datacenters = ["dc1"]

  group "api" {
    network {
      mode = "bridge"

      port "http" {
        to = 8080
      }

      port "metrics" {}
    }

    service {
      name = "api"
      port = "http"

      check {
        name     = "api-health"
        type     = "http"
        path     = "/health"
        expose   = true
        interval = "5s"
        timeout  = "2s"
      }

      check {
        name     = "api-grpc"
        type     = "grpc"
        expose   = true
        interval = "10s"
        timeout  = "2s"
      }

      connect {
        sidecar_service {
          proxy {
            expose {
              path {
                path            = "/metrics"
                protocol        = "http"
                local_path_port = 9102
                listener_port   = "metrics"
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
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:8080"]
      }
    }
  }
}
