job "web" {
  group "web" {
    network {
      mode = "bridge"
    }

    service {
      name = "web"
      port = "8080"

      connect {
        sidecar_service {
          proxy {
            upstreams {
              destination_name = "api"
              local_bind_port  = 9000
            }
          }
        }
      }
    }

    service {
      name = "admin"
      port = "8081"

      connect {
        sidecar_service {
          proxy {
            upstreams {
              destination_name = "db"
              local_bind_port  = 9000
            }
            upstreams {
              local_bind_port = 70000
            }
          }
        }
      }
    }

    task "web" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}
