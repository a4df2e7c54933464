job "web" {
  group "web" {
    network {
      mode = "bridge"
    }

    service {
      name = "Count_API"
      port = "9001"

      connect {
        sidecar_service {}
      }
    }

    task "web" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}
