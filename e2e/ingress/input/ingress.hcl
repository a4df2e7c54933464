# An ingress gateway in front of two mesh services: the gateway group has
# no task of its own (meshlet injects connect-ingress-ingress); its tcp
# listener (inside the namespace on TCP_PORT, mapped to the same static
# host port) forwards to db, its http listener on HTTP_PORT routes by Host
# header to web ("web.ingress.*") and to db-http ("api.example.com").
# TCP_PORT and HTTP_PORT are replaced by the test with free ports.
job "ingress-e2e" {
  datacenters = ["dc1"]

  group "gateway" {
    network {
      mode = "bridge"
      port "tcp" {
        static = TCP_PORT
        to     = TCP_PORT
      }
      port "http" {
        static = HTTP_PORT
        to     = HTTP_PORT
      }
    }

    service {
      name = "ingress"
      port = "TCP_PORT"

      connect {
        gateway {
          proxy {
            connect_timeout = "2s"
          }
          ingress {
            listener {
              port     = TCP_PORT
              protocol = "tcp"
              service {
                name = "db"
              }
            }
            listener {
              port     = HTTP_PORT
              protocol = "http"
              service {
                name = "web"
              }
              service {
                name  = "api"
                hosts = ["api.example.com"]
              }
            }
          }
        }
      }
    }
  }

  group "db" {
    network {
      mode = "bridge"
    }

    service {
      name = "db"
      port = "9090"

      connect {
        sidecar_service {}
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

  group "web" {
    network {
      mode = "bridge"
    }

    service {
      name = "web"
      port = "8080"

      connect {
        sidecar_service {}
      }
    }

    service {
      name = "api"
      port = "8081"

      connect {
        sidecar_service {}
      }
    }

    task "web" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:8080", "-id", "web", "-any-path"]
      }
    }

    task "api" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:8081", "-id", "api", "-any-path"]
      }
    }
  }
}
