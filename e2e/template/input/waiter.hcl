# A task whose template lists a service nobody runs yet: it must wait.
job "tmpl-waiter" {
  datacenters = ["dc1"]

  group "w" {
    task "w" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "exec sleep 3600"]
      }

      template {
        data        = "{{ range service \"tmpl-late\" }}{{ .Port }}{{ end }}\n"
        destination = "local/late.txt"
      }
    }
  }
}
