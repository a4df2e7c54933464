# Runtime references, quoted and bare, are kept as "${...}" text for the
# client to expand when the task starts.
job "runtime-refs" {
  group "app" {
    network {
      mode = "cni/mesh"

      port "http" {}
      port "admin" {
        static = 19001
      }
    }

    service {
      name    = "runtime-refs"
      port    = "http"
      address = attr.unique.network.ip-address
      meta = {
        host_port = NOMAD_HOST_PORT_http
        rack      = "${meta.rack}"
      }
    }

    task "app" {
      driver = "raw_exec"

      config {
        command = attr.meshlet.binary
        args = [
          "demo-app", "hello",
          "-listen", "127.0.0.1:${NOMAD_PORT_http}",
          "-id", "${NOMAD_ALLOC_INDEX}-${node.datacenter}",
          "-upstream", "http://${NOMAD_UPSTREAM_ADDR_api}/x",
        ]
        nested = {
          list  = [1, 2.5, true, "s"]
          inner = { deep = NOMAD_META_owner }
        }
      }

      env = {
        ADMIN = "${NOMAD_ADDR_admin}"
        LOG   = "${env["HOME"]}/log"
      }
    }
  }
}
