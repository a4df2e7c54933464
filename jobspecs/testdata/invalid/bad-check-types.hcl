# Fields a check's type does not use, ttl checks, check and service tasks.
job "web" {
  group "web" {
    network {
      port "http" {}
    }

    service {
      name = "web"
      port = "http"

      check {
        type     = "ttl"
        interval = "10s"
        timeout  = "2s"
        header {
          X-Ignored = ["ttl"]
        }
      }

      check {
        type      = "tcp"
        interval  = "10s"
        timeout   = "2s"
        path      = "/health"
        protocol  = "https"
        method    = "GET"
        body      = "x"
        task      = "web"
        grpc_use_tls = true

        header {
          X-Probe = ["1"]
        }
      }

      check {
        type         = "http"
        path         = "/health"
        interval     = "10s"
        timeout      = "2s"
        grpc_service = "web.Health"
      }

      check {
        type     = "script"
        command  = "/bin/check"
        task     = "nope"
        interval = "10s"
        timeout  = "2s"
        protocol = "http"
      }

      check {
        type     = "grpc"
        interval = "10s"
        method   = "GET"
      }
    }

    service {
      name = "admin"
      port = "http"

      check {
        name     = "admin-script"
        type     = "script"
        command  = "/bin/check"
        interval = "10s"
        timeout  = "2s"
      }
    }

    service {
      name = "ops"
      port = "http"
      task = "nope"

      check {
        type     = "script"
        command  = "/bin/check"
        interval = "10s"
        timeout  = "2s"
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
