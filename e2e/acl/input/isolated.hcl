# One exec task (isolated: chroot, own PID namespace, nobody) and one
# raw_exec task, for alloc exec with and without the capabilities.
job "isolated" {
  group "g" {
    task "jailed" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo secret > $NOMAD_TASK_DIR/mine; while true; do sleep 1; done"]
      }
      resources {
        cpu    = 50
        memory = 32
      }
    }
    task "host" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do sleep 1; done"]
      }
    }
  }
}
