# hello-exec: the hello job run by the exec driver, which puts the task in
# its own cgroups with CPU and memory limits (raw_exec runs it as is).
job "hello-exec" {
  type = "service"

  group "hello" {
    task "hello" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do echo \"hello from $NOMAD_ALLOC_ID\"; sleep 2; done"]
      }

      resources {
        cpu    = 50
        memory = 32
      }

      logs {
        max_files     = 3
        max_file_size = 5
      }
    }
  }
}
