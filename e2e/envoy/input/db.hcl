# One connect service, for checking what an Envoy sidecar is given.
job "envoy-db" {
  datacenters = ["dc1"]

  group "db" {
    network {
      mode = "bridge"
    }

    service {
      name = "db"
      port = "9090"

      connect {
        sidecar_service {
          proxy {
            config {
              envoy_prometheus_bind_addr = "0.0.0.0:9102"
            }
          }
        }
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
