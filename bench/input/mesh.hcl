# Data-plane benchmark job: three servers and one client, all in bridge
# mode with connect sidecars (the built-in proxy). The client reaches each
# server through its upstream on 127.0.0.1 (mesh path); the harness also
# reaches each server app directly at its allocation's address (baseline).
# Server apps listen on 0.0.0.0 inside their namespace for that reason.
variable "iperf3" {
  type    = string
  default = "/usr/bin/iperf3"
}

job "bench-mesh" {
  datacenters = ["dc1"]

  # HTTP, served by the sidecars' HTTP connection managers (L7).
  group "srv-http" {
    network {
      mode = "bridge"
    }

    service {
      name = "bench-http"
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

  # The same app behind plain TCP proxying (L4): one mTLS connection and
  # one authorization per client connection.
  group "srv-tcp" {
    network {
      mode = "bridge"
    }

    service {
      name = "bench-tcp"
      port = "9002"

      connect {
        sidecar_service {}
      }
    }

    task "app" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "counting", "-listen", "0.0.0.0:9002"]
      }
    }
  }

  # Bulk TCP.
  group "srv-iperf" {
    network {
      mode = "bridge"
    }

    service {
      name = "bench-iperf"
      port = "5201"

      connect {
        sidecar_service {}
      }
    }

    task "iperf3" {
      driver = "raw_exec"

      config {
        command = var.iperf3
        args    = ["-s", "-p", "5201"]
      }
    }
  }

  group "client" {
    network {
      mode = "bridge"
    }

    service {
      name = "bench-client"
      port = "7000"

      connect {
        sidecar_service {
          proxy {
            upstreams {
              destination_name = "bench-http"
              local_bind_port  = 8001

              config {
                protocol = "http"
              }
            }

            upstreams {
              destination_name = "bench-tcp"
              local_bind_port  = 8002
            }

            upstreams {
              destination_name = "bench-iperf"
              local_bind_port  = 8003
            }
          }
        }
      }
    }

    # The load generators run in this namespace through `ip netns exec`;
    # the task only keeps the allocation alive.
    task "idle" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "127.0.0.1:7000"]
      }
    }
  }
}
