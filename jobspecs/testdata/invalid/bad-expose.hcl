job "bad-expose" {
  datacenters = ["dc1"]

  group "api" {
    network {
      mode = "bridge"

      port "http" {}

      port "metrics" {}
    }

    service {
      name = "api"
      port = "http"

      check {
        name     = "api-health"
        type     = "http"
        path     = "/health"
        expose   = true
        interval = "5s"
        timeout  = "2s"
      }

      check {
        name     = "on-the-app-port"
        type     = "http"
        path     = "/ready"
        port     = "http"
        expose   = true
        interval = "5s"
        timeout  = "2s"
      }

      check {
        name     = "no-slash"
        type     = "http"
        path     = "health"
        expose   = true
        interval = "5s"
        timeout  = "2s"
      }

      check {
        name     = "tcp-exposed"
        type     = "tcp"
        expose   = true
        interval = "5s"
        timeout  = "2s"
      }

      connect {
        sidecar_service {
          proxy {
            expose {
              path {
                path            = "metrics"
                protocol        = "grpc"
                local_path_port = 9102
                listener_port   = "9102"
              }

              path {
                path            = "/stats"
                local_path_port = 9102
                listener_port   = "connect-proxy-api"
              }

              path {
                path            = "/ok"
                local_path_port = 9102
                listener_port   = "metrics"
              }

              path {
                path            = "/ok"
                local_path_port = 70000
                listener_port   = "metrics"
              }

              path {
                path            = "/nolistener"
                local_path_port = 9102
              }
            }
          }
        }
      }
    }

    task "api" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }
    }
  }

  group "hostmode" {
    service {
      name = "plain"
      port = "8080"

      check {
        type     = "http"
        path     = "/health"
        expose   = true
        interval = "5s"
        timeout  = "2s"
      }
    }

    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }
    }
  }
}
