# A docker task whose image is nowhere. The registry is on 127.0.0.1 (no
# traffic leaves the host): on port 1 nothing listens, so the pull fails
# at once; the test's silent listener accepts and never answers, so
# image_pull_timeout ends the pull. Either way the task fails with a clear
# event and no restart.
variable "image" {
  type    = string
  default = "127.0.0.1:1/meshlet-e2e/missing:latest"
}

variable "pull_timeout" {
  type    = string
  default = "20s"
}

job "missing" {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "t" {
      driver = "docker"

      config {
        image              = var.image
        image_pull_timeout = var.pull_timeout
      }
    }
  }
}
