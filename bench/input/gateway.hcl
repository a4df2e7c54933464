# Ingress-gateway benchmark job: one HTTP server behind its sidecar, an
# ingress gateway whose http listener routes by Host header to it, and an
# idle client allocation the load generator runs in (`ip netns exec`).
# The harness measures, interleaved: the client straight to the server app
# at its allocation's address (baseline), and the client to the gateway at
# its allocation's address with Host: bench-gw.example.com (gateway →
# server sidecar over mTLS → app). The server app listens on 0.0.0.0
# inside its namespace for the direct path.
job "bench-gateway" {
  datacenters = ["dc1"]

  group "srv-http" {
    network {
      mode = "bridge"
    }

    service {
      name = "bench-gw-http"
      port = "9001"

      connect {
        sidecar_service {
          proxy {
            config {
              protocol = "http"
            }
          }
        }
      }
    }

    task "app" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "counting", "-listen", "0.0.0.0:9001"]
      }
    }
  }

  # No task: meshlet injects connect-ingress-bench-ingress (the built-in
  # proxy in gateway mode), whose listener binds 0.0.0.0:8080 inside the
  # allocation's namespace.
  group "gateway" {
    network {
      mode = "bridge"
    }

    service {
      name = "bench-ingress"
      port = "8080"

      connect {
        gateway {
          ingress {
            listener {
              port     = 8080
              protocol = "http"
              service {
                name  = "bench-gw-http"
                hosts = ["bench-gw.example.com"]
              }
            }
          }
        }
      }
    }
  }

  group "client" {
    network {
      mode = "bridge"
    }

    task "idle" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "127.0.0.1:7000"]
      }
    }
  }
}
