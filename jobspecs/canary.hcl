# The L7 traffic walkthrough (docs/traffic.md): service-a calls service-b
# through its upstream on 127.0.0.1:9000; service-b runs as v1 (one steady
# and one flaky instance, answering every 2nd request 503) and v2, told
# apart by the service meta "version". Routing, the canary split and the
# retries come from the config entries in config/canary/.
job "canary" {
  datacenters = ["dc1"]

  group "service-b-v1" {
    network {
      mode = "bridge"
    }

    service {
      name = "service-b"
      port = "9001"
      meta {
        version = "v1"
      }

      connect {
        sidecar_service {}
      }
    }

    task "service-b" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:9001", "-any-path", "-id", "v1"]
      }
    }
  }

  group "service-b-v1-flaky" {
    network {
      mode = "bridge"
    }

    service {
      name = "service-b"
      port = "9001"
      meta {
        version = "v1"
      }

      connect {
        sidecar_service {}
      }
    }

    task "service-b" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:9001", "-any-path", "-fail-every", "2", "-id", "v1"]
      }
    }
  }

  group "service-b-v2" {
    network {
      mode = "bridge"
    }

    service {
      name = "service-b"
      port = "9001"
      meta {
        version = "v2"
      }

      connect {
        sidecar_service {}
      }
    }

    task "service-b" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:9001", "-any-path", "-id", "v2"]
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
        args = ["demo-app", "hello", "-listen", "127.0.0.1:8080", "-id", "a",
        "-upstream", "http://${NOMAD_UPSTREAM_ADDR_service_b}/"]
      }
    }
  }
}
