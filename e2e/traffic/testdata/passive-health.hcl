# service-a calls service-b through its upstream on 127.0.0.1:9000;
# service-b has a steady instance ("good") and a broken one answering
# every request 503 ("bad"). Used by TestPassiveHealthCheckEjects.
job "passive-health" {
  datacenters = ["dc1"]

  group "service-b-good" {
    network {
      mode = "bridge"
    }

    service {
      name = "service-b"
      port = "9001"

      connect {
        sidecar_service {}
      }
    }

    task "service-b" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:9001", "-any-path", "-id", "good"]
      }
    }
  }

  group "service-b-bad" {
    network {
      mode = "bridge"
    }

    service {
      name = "service-b"
      port = "9001"

      connect {
        sidecar_service {}
      }
    }

    task "service-b" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:9001", "-any-path", "-fail-every", "1", "-id", "bad"]
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
              destination_name = "service-b"
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
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:8080", "-id", "a"]
      }
    }
  }
}
