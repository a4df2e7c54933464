# The service the consumer's templates list; the test scales it with
# -var count=N (and renames it with -var service=NAME).
variable "count" {
  type    = number
  default = 1
}

variable "service" {
  type    = string
  default = "tmpl-api"
}

job "tmpl-backend" {
  datacenters = ["dc1"]

  group "api" {
    count = var.count

    network {
      port "http" {}
    }

    service {
      name = var.service
      port = "http"
    }

    task "api" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "exec sleep 3600"]
      }
    }
  }
}
