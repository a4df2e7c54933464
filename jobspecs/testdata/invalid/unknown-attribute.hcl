job "web" {
  group "web" {
    task "web" {
      driver = "raw_exec"
      foo    = 1
      comand = "/bin/true"

      config {
        command = "/bin/true"
      }

      resource {
        cpu = 100
      }
    }
  }
}
