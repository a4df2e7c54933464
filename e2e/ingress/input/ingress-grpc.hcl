# An ingress gateway with a grpc listener (h2c from the client) in front
# of a gRPC service: the gateway speaks HTTP/2 over mTLS to its sidecar,
# which speaks h2c to the app. hosts = ["*"] routes any :authority (a
# client dialing 127.0.0.1:GRPC_PORT sends that). GRPC_PORT is replaced by
# the test with a free port.
job "ingress-grpc-e2e" {
  datacenters = ["dc1"]

  group "gateway" {
    network {
      mode = "bridge"
      port "grpc" {
        static = GRPC_PORT
        to     = GRPC_PORT
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

    task "grpcsvc" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "grpc-hello", "-listen", "127.0.0.1:9001", "-id", "g1"]
      }
    }
  }
}
