# TCP through the mesh: web reaches db's echo server only through its
# upstream listener on 127.0.0.1:9191 inside web's allocation.
job "faults-echo" {
  datacenters = ["dc1"]

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
        sidecar_service {
          proxy {
            upstreams {
              destination_name = "db"
              local_bind_port  = 9191
            }
          }
        }
      }
    }

    task "web" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "127.0.0.1:8080"]
      }
    }
  }
}
