job "web" {
  group "web" {
    network {
      port "http" {}
    }

    service {
      name = "web"
      port = "http"

      connect {
        sidecar_service {}
      }
    }

    task "web" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }

  group "nonet" {
    service {
      name = "nonet"

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
