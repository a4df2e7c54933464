job "web" {
  group "web" {
    task "web" {
      config {
        command = "/bin/true"
      }
    }

    task "web" {
      driver = "exec"
      config { command = "/bin/true" }
    }
  }

  group "empty" {
  }
}
