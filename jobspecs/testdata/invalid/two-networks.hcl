job "web" {
  group "web" {
    network {
      mode = "bridge"
    }

    network {
      mode = "overlay"
    }

    task "web" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}
