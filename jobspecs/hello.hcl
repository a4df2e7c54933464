# hello: the smallest meshlet job. One raw_exec task that prints a line
# every two seconds; `meshlet alloc logs <alloc>` shows them.
job "hello" {
  type = "service"

  group "hello" {
    count = 1

    task "hello" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do echo \"hello from $NOMAD_ALLOC_ID\"; sleep 2; done"]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
