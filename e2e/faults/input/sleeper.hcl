# A bridge-mode job with one small task and a mapped port: each start/stop
# cycle creates and removes a namespace, a veth, an IPAM lease, DNAT rules
# and an alloc dir.
job "faults-sleeper" {
  datacenters = ["dc1"]

  group "s" {
    network {
      mode = "bridge"
      port "http" {
        to = 8080
      }
    }

    task "s" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "127.0.0.1:8080"]
      }
    }
  }
}
