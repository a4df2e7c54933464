# The service the consumer's templates list; the test scales it with
# -var count=N.
variable "count" {
  type    = number
  default = 1
}

job "tmpl-backend" {
  datacenters = ["dc1"]

  group "api" {
    count = var.count

    network {
      port "http" {}
    }

    service {
      name = "tmpl-api"
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
