job "node-exporter" {
  type = "system"

  group "exporter" {
    count = 3

    task "exporter" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}
