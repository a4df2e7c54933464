# An ingress gateway in host network mode: its proxy runs in the host's
# namespace and binds its listeners there. envoy_gateway_no_default_bind
# and one envoy_gateway_bind_addresses entry keep them on 127.0.0.1 (the
# default would be every address of the host); its admin listener binds
# 127.0.0.2 on a dynamic port meshlet adds ("connect-admin-ingress-host").
# TCP_PORT and HTTP_PORT are replaced by the test with free ports.
job "ingress-host-e2e" {
  datacenters = ["dc1"]

  group "gateway" {
    network {
      mode = "host"
    }

    service {
      name = "ingress-host"

      connect {
        gateway {
          proxy {
            envoy_gateway_no_default_bind = true
            envoy_gateway_bind_addresses "loopback" {
              address = "127.0.0.1"
              port    = HTTP_PORT
            }
          }
          ingress {
            listener {
              port     = TCP_PORT
              protocol = "tcp"
              service {
                name = "hostdb"
              }
            }
            listener {
              port     = HTTP_PORT
              protocol = "http"
              service {
                name = "hostweb"
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
      name = "hostweb"
      port = "8080"

      connect {
        sidecar_service {}
      }
    }

    service {
      name = "hostdb"
      port = "9090"

      connect {
        sidecar_service {}
      }
    }

    task "web" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:8080", "-id", "hostweb", "-any-path"]
      }
    }

    task "db" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "127.0.0.1:9090"]
      }
    }
  }
}
