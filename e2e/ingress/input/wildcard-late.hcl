# A service that joins the mesh after the wildcard ingress gateway runs.
job "wildcard-late" {
  datacenters = ["dc1"]

  group "late" {
    network {
      mode = "bridge"
    }

    service {
      name = "wlate"
      port = "8080"

      connect {
        sidecar_service {}
      }
    }

    task "wlate" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:8080", "-id", "wlate", "-any-path"]
      }
    }
  }
}
