# The same artifact with a checksum it does not have: the task never
# starts, its event says why, and with no restarts allowed it fails.
variable "base" {
  type = string
}

job "badsum" {
  group "app" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "reader" {
      driver = "exec"

      artifact {
        source = "${var.base}/site.tar.gz"

        options {
          checksum = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
        }
      }

      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do sleep 1; done"]
      }
    }
  }
}
