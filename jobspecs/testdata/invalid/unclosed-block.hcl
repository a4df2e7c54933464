job "web" {
  group "web" {
    task "web" {
      driver = "raw_exec"
    }
