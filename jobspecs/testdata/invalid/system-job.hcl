job "node-exporter" {
  type = "system"

  group "exporter" {
    task "exporter" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}
