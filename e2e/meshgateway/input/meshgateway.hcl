# A mesh gateway on one agent (datacenter dc1) in front of api, a TCP echo
# behind a sidecar. The gateway group has no task of its own: meshlet
# injects connect-mesh-mesh-gateway. Its port is mapped on the host's
# loopback (MESH_PORT, replaced by the test), where the test connects as a
# mesh client would: mTLS to api's sidecar, routed by the SNI
# api.default.dc1.internal.<trust domain>, never terminated at the gateway.
job "meshgateway-e2e" {
  datacenters = ["dc1"]

  group "gateway" {
    network {
      mode = "bridge"

      port "mesh" {
        static = MESH_PORT
        to     = MESH_PORT
      }
    }

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

  group "api" {
    network {
      mode = "bridge"
    }

    service {
      name = "api"
      port = "9090"

      connect {
        sidecar_service {}
      }
    }

    task "api" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "127.0.0.1:9090"]
      }
    }
  }
}
