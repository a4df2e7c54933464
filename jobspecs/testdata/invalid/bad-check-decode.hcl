# Decode errors in check blocks: unknown keys, header shapes, wrong types.
job "web" {
  group "web" {
    service {
      name = "web"

      check {
        type         = "http"
        path         = "/"
        intervall    = "10s"
        timeout      = "2s"
        grpc_use_tls = "maybe"
        advertise    = "host"

        header {
          X-One = "not-a-list"
          nested {
            a = ["b"]
          }
        }
      }

      check {
        type     = "http"
        path     = "/"
        interval = "10s"
        timeout  = "2s"
        header   = ["X-Probe"]

        check_restart {
          limit  = 1
          period = "1m"
        }
      }

      check {
        type     = "http"
        path     = "/"
        interval = "10s"
        timeout  = "2s"
        header   = { X-Probe = ["a"] }
        header {
          X-Other = ["b"]
        }
      }
    }

    task "web" {
      driver = "exec"

      config {
        command = "/bin/web"
      }
    }
  }
}
