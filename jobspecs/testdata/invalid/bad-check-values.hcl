# Values Nomad rejects: statuses, thresholds, on_update with check_restart,
# http fields that cannot make a request, check_restart bounds.
job "web" {
  group "web" {
    network {
      port "http" {}
    }

    service {
      name = "web"
      port = "http"

      check {
        type           = "http"
        path           = "http://example.invalid/health"
        protocol       = "ftp"
        method         = "GE T"
        interval       = "10s"
        initial_status = "ok"
        on_update      = "always"
        notes          = "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"

        header = {
          "Bad Name" = ["x"]
          X-Multi    = ["a\r\nInjected: 1"]
        }
      }

      check {
        type                     = "script"
        command                  = "/bin/check"
        task                     = "web"
        interval                 = "10s"
        timeout                  = "500ms"
        success_before_passing   = 1
        failures_before_critical = -1
        on_update                = "ignore"
      }

      check {
        type                    = "tcp"
        interval                = "10s"
        timeout                 = "2s"
        failures_before_warning = -2
        on_update               = "ignore_warnings"
      }

      check_restart {
        limit = -1
        grace = "-5s"
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
