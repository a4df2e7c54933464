job "web" {
  group "web" {
    network {
      mode = "bridge"
    }

    service {
      name = "web"
      port = "9090"

      connect {
        sidecar_service {}
      }
    }

    task "web" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }

    task "sneaky" {
      driver = "raw_exec"
      kind   = "connect-proxy:db"
      config { command = "/bin/true" }
    }
  }
}
