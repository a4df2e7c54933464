# terminating-gateway: countdash with count-api outside the mesh, in the
# shape of Nomad's terminating gateway example. The "api" group runs the
# counting service with no sidecar: its plain service is registered in the
# catalog at the allocation's bridge address, where the app listens. The
# "gateway" group has no task of its own (meshlet injects
# connect-terminating-api-gateway and a dynamic port for it) and links
# count-api; the dashboard's upstream to count-api resolves to the gateway,
# which terminates the sidecar's mTLS (presenting count-api's certificate),
# asks the intentions with count-api as destination and forwards plain TCP
# to the app. Run it instead of countdash.hcl (both use host port 9002).
# A service registered through /v1/catalog/register (docs/jobspec.md,
# "Terminating gateways") is linked the same way; add ca_file (and sni,
# cert_file, key_file) to a linked service for TLS origination.
job "countdash-terminating" {
  datacenters = ["dc1"]

  group "api" {
    network {
      mode = "bridge"
    }

    # No connect block: the service is outside the mesh.
    service {
      name = "count-api"
      port = "9001"
    }

    task "api" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "counting", "-listen", "0.0.0.0:9001"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }

  group "gateway" {
    network {
      mode = "bridge"
    }

    service {
      name = "api-gateway"

      connect {
        gateway {
          proxy {
            connect_timeout = "2s"
          }
          terminating {
            service {
              name = "count-api"
            }
          }
        }
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
