# One connect service, for checking what an Envoy sidecar is given, on a
# client without raw_exec: the app is an exec task, the sidecar runs on the
# built-in connect_proxy driver.
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
      driver = "exec"

      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
    }
  }
}
