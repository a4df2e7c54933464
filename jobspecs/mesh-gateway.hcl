# mesh-gateway: the dc1 half of countdash split across two datacenters
# (two groups of nodes of one cluster: clients with `datacenter = "dc1"`
# and `datacenter = "dc2"`). Run a copy with datacenters = ["dc2"] and
# only the "gateway" and "api" groups of countdash.hcl in dc2.
#
# The dashboard's upstream names count-api in dc2; mode "local" sends the
# sidecar's mTLS connection to this datacenter's mesh gateway, which
# routes it by its SNI, without decrypting it, to dc2's mesh gateway,
# which hands it to a count-api sidecar. "remote" skips the local gateway.
job "mesh-gateway" {
  datacenters = ["dc1"]

  group "gateway" {
    network {
      mode = "bridge"

      port "mesh" {
        static = 8443
        to     = 8443
      }
    }

    # The injected connect-mesh-mesh-gateway task runs the proxy.
    service {
      name = "mesh-gateway"
      port = "mesh"

      connect {
        gateway {
          mesh {}
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
              datacenter       = "dc2"
              local_bind_port  = 8080

              mesh_gateway {
                mode = "local"
              }
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
