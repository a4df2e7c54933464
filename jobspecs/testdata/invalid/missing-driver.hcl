job "web" {
  group "web" {
    task "web" {
      config {
        command = "/bin/true"
      }
    }

    task "web" {
      driver = "exec"
    }
  }

  group "empty" {
  }
}
