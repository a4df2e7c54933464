# Every field of Nomad's check block, as the client agent runs them: http,
# grpc, tcp and script checks with check_restart, set per check or
# inherited from the service.
job "checks" {
  datacenters = ["dc1"]

  group "web" {
    network {
      mode = "bridge"

      port "http" {
        to = 8080
      }

      port "grpc" {
        to = 9090
      }
    }

    service {
      name = "web"
      port = "http"

      check {
        name            = "web-http"
        type            = "http"
        port            = "http"
        path            = "/health?full=1"
        protocol        = "https"
        method          = "POST"
        body            = "{\"probe\":true}"
        address_mode    = "alloc"
        interval        = "10s"
        timeout         = "2s"
        tls_skip_verify = true
        tls_server_name = "web.internal"
        initial_status  = "warning"
        on_update       = "ignore_warnings"
        notes           = "answers 200 when the database is reachable"

        success_before_passing   = 2
        failures_before_critical = 3
        failures_before_warning  = 1

        header {
          Authorization = ["Bearer ${NOMAD_ALLOC_ID}"]
          X-Probe       = ["meshlet", "checks"]
        }

        check_restart {
          limit           = 3
          grace           = "30s"
          ignore_warnings = true
        }
      }

      check {
        name         = "web-grpc"
        type         = "grpc"
        port         = "grpc"
        grpc_service = "web.v1.Health"
        grpc_use_tls = true
        expose       = true
        interval     = "15s"
        timeout      = "3s"
        on_update    = "require_healthy"
      }

      check {
        name     = "web-script"
        type     = "script"
        task     = "web"
        command  = "/bin/sh"
        args     = ["-c", "test -f /tmp/ready"]
        interval = "30s"
        timeout  = "5s"
      }

      check_restart {
        limit = 5
        grace = "1m"
      }

      connect {
        sidecar_service {}
      }
    }

    task "web" {
      driver = "exec"

      config {
        command = "/bin/web"
      }

      service {
        name     = "web-admin"
        port     = "8081"
        provider = "nomad"

        check {
          type           = "tcp"
          interval       = "5s"
          timeout        = "1s"
          initial_status = "passing"
          on_update      = "ignore"
          header         = {}
        }

        check {
          type     = "http"
          path     = "/ready"
          interval = "5s"
          timeout  = "1s"
          header = {
            "Content-Type" = ["application/json"]
          }
        }
      }
    }
  }
}
