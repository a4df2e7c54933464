# countdash across nodes: the countdash demo (see countdash.hcl) with its
# two groups on two different client nodes, so the dashboard reaches
# count-api through the mesh across hosts: its sidecar's upstream listener
# on 127.0.0.1:8080, mTLS to the other node's address and the port mapped
# to count-api's sidecar. Run it on a cluster with two clients (the
# Vagrantfile's MESHLET_CLIENTS=2; docs/operations.md).
job "countdash-cluster" {
  type = "service"

  constraint {
    operator = "distinct_hosts"
    value    = "true"
  }

  group "api" {
    network {
      mode = "bridge"
    }

    service {
      name = "count-api"
      port = "9001"

      connect {
        sidecar_service {}
      }
    }

    task "web" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "counting", "-listen", "127.0.0.1:9001"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }

  group "dashboard" {
    network {
      mode = "bridge"

      port "http" {
        static = 9002
        to     = 9002
      }
    }

    service {
      name = "count-dashboard"
      port = "http"

      connect {
        sidecar_service {
          proxy {
            upstreams {
              destination_name = "count-api"
              local_bind_port  = 8080
            }
          }
        }
      }
    }

    task "dashboard" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args = [
          "demo-app", "dashboard",
          "-listen", "0.0.0.0:${NOMAD_PORT_http}",
          "-counting-url", "http://${NOMAD_UPSTREAM_ADDR_count_api}",
        ]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
