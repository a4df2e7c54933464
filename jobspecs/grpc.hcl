# gRPC through the mesh (docs/traffic.md, "gRPC and HTTP/2"): grpc-b runs
# as v1 and v2 (service meta "version"), a plaintext gRPC server bound to
# 127.0.0.1 inside its namespace, answering grpc.health.v1 with its version
# in the x-instance-id header. Its grpc check goes through the sidecar's
# expose listener (expose = true), since nothing outside the namespace
# reaches 127.0.0.1. service-a calls grpc-b through its upstream on
# 127.0.0.1:9000. With service-defaults Protocol = "grpc" written, the
# sidecars speak h2c to the apps and h2 over mTLS between each other, and
# route, split and balance every call, not every connection.
job "grpc" {
  datacenters = ["dc1"]

  group "grpc-b-v1" {
    network {
      mode = "bridge"
    }

    service {
      name = "grpc-b"
      port = "9001"
      meta {
        version = "v1"
      }

      check {
        name         = "grpc-b-health"
        type         = "grpc"
        grpc_service = "hello"
        expose       = true
        interval     = "1s"
        timeout      = "1s"
      }

      connect {
        sidecar_service {}
      }
    }

    task "grpc-b" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "grpc-hello", "-listen", "127.0.0.1:9001", "-id", "v1"]
      }
    }
  }

  group "grpc-b-v2" {
    network {
      mode = "bridge"
    }

    service {
      name = "grpc-b"
      port = "9001"
      meta {
        version = "v2"
      }

      check {
        name         = "grpc-b-health"
        type         = "grpc"
        grpc_service = "hello"
        expose       = true
        interval     = "1s"
        timeout      = "1s"
      }

      connect {
        sidecar_service {}
      }
    }

    task "grpc-b" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "grpc-hello", "-listen", "127.0.0.1:9001", "-id", "v2"]
      }
    }
  }

  group "service-a" {
    network {
      mode = "bridge"
    }

    service {
      name = "service-a"
      port = "8080"

      connect {
        sidecar_service {
          proxy {
            upstreams {
              destination_name = "grpc-b"
              local_bind_port  = 9000
            }
          }
        }
      }
    }

    task "service-a" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "grpc-hello", "-listen", "127.0.0.1:8080", "-id", "a"]
      }
    }
  }
}
