# An ingress gateway with a grpc listener (h2c from the client) in front
# of a gRPC service: the gateway speaks HTTP/2 over mTLS to its sidecar,
# which speaks h2c to the app. hosts = ["*"] routes any :authority (a
# client dialing 127.0.0.1:GRPC_PORT sends that). Its http2 listener takes
# h2c to h2web (an HTTP/1.1 app behind its sidecar). GRPC_PORT and
# H2_PORT are replaced by the test with free ports.
job "ingress-grpc-e2e" {
  datacenters = ["dc1"]

  group "gateway" {
    network {
      mode = "bridge"
      port "grpc" {
        static = GRPC_PORT
        to     = GRPC_PORT
      }
      port "h2" {
        static = H2_PORT
        to     = H2_PORT
      }
    }

    service {
      name = "ingress-grpc"
      port = "GRPC_PORT"

      connect {
        gateway {
          ingress {
            listener {
              port     = GRPC_PORT
              protocol = "grpc"
              service {
                name  = "grpcsvc"
                hosts = ["*"]
              }
            }
            listener {
              port     = H2_PORT
              protocol = "http2"
              service {
                name = "h2web"
              }
            }
          }
        }
      }
    }
  }

  group "grpcsvc" {
    network {
      mode = "bridge"
    }

    service {
      name = "grpcsvc"
      port = "9001"

      connect {
        sidecar_service {}
      }
    }

    service {
      name = "h2web"
      port = "8080"

      connect {
        sidecar_service {}
      }
    }

    task "h2web" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:8080", "-id", "h2web", "-any-path"]
      }
    }

    task "grpcsvc" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "grpc-hello", "-listen", "127.0.0.1:9001", "-id", "g1"]
      }
    }
  }
}
