job "web" {
  group "web" {
    network {
      port "http" {
        static = 70000
      }
      port "admin" {
        to = -2
      }
      port "http" {}
    }

    task "web" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}
