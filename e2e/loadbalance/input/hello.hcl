# HTTP with load balancing: service-a merges the answer of one of the two
# service-b instances, reached through its upstream on 127.0.0.1:9000.
job "hello-mesh" {
  datacenters = ["dc1"]

  group "service-b" {
    count = 2

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
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:9001", "-path", "/hello_b", "-id", "b-${NOMAD_ALLOC_INDEX}"]
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
        "-upstream", "http://${NOMAD_UPSTREAM_ADDR_service_b}/hello_b"]
      }
    }
  }
}
