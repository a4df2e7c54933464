# One connect service, count-api: registering it needs service write on
# count-api.
job "acl-api" {
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
    task "api" {
      driver = "raw_exec"
      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "counting", "-listen", "127.0.0.1:9001"]
      }
    }
  }
}
