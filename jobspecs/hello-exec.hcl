# hello-exec: the hello job run by the exec driver, which isolates the
# task (chroot-free namespaces and cgroups) instead of running it as is.
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
