# An exec task (chroot, user nobody) whose artifact, a tar.gz from a test
# server on 127.0.0.1, is checked against its sha256, unpacked into
# local/site and given to the task's user. The first run appends the file
# (and a line of its own, which only the owner can) to local/seen.txt and
# exits 1; the restart finds the artifact in place without fetching it
# again, appends once more and stays up.
variable "base" {
  type = string
}

variable "sum" {
  type = string
}

job "artifact" {
  group "app" {
    restart {
      attempts = 1
      delay    = "1s"
      mode     = "fail"
    }

    task "reader" {
      driver = "exec"
      user   = "nobody"

      artifact {
        source      = "${var.base}/site.tar.gz"
        destination = "local/site"
        chown       = true

        options {
          checksum = var.sum
        }

        headers {
          X-Meshlet-Test = "artifact"
        }
      }

      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          echo owned >> $NOMAD_TASK_DIR/site/hello.txt || exit 2
          cat $NOMAD_TASK_DIR/site/hello.txt >> $NOMAD_TASK_DIR/seen.txt
          if [ -f $NOMAD_TASK_DIR/ran ]; then
            while true; do sleep 1; done
          fi
          : > $NOMAD_TASK_DIR/ran
          exit 1
        EOT
        ]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
