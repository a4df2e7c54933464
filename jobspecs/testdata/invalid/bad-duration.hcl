job "web" {
  group "web" {
    restart {
      interval = "3 minutes"
      delay    = 15
      mode     = "sometimes"
    }

    task "web" {
      driver       = "raw_exec"
      config { command = "/bin/true" }
      kill_timeout = "5x"
    }
  }
}
