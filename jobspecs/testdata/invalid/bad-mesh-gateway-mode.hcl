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
              datacenter       = "dc2"
              local_bind_port  = 9191

              mesh_gateway {
                mode = "nearest"
              }
            }
          }
        }
      }
    }

    task "web" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }
    }
  }
}
