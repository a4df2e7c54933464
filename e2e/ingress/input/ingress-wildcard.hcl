# An ingress gateway whose http listener routes the wildcard service "*":
# every mesh service of protocol http, each by its default host
# "<service>.ingress.*" (Consul's semantics), updated as services come
# and go. HTTP_PORT is replaced by the test with a free port.
job "ingress-wildcard-e2e" {
  datacenters = ["dc1"]

  group "gateway" {
    network {
      mode = "bridge"
      port "http" {
        static = HTTP_PORT
        to     = HTTP_PORT
      }
    }

    service {
      name = "ingress-wild"
      port = "HTTP_PORT"

      connect {
        gateway {
          ingress {
            listener {
              port     = HTTP_PORT
              protocol = "http"
              service {
                name = "*"
              }
            }
          }
        }
      }
    }
  }

  group "backends" {
    network {
      mode = "bridge"
    }

    service {
      name = "wa"
      port = "8080"

      connect {
        sidecar_service {}
      }
    }

    task "wa" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:8080", "-id", "wa", "-any-path"]
      }
    }
  }
}
