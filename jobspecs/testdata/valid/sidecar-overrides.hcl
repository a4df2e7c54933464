# A connect service with a custom sidecar task, exposed health checks and
# raw Envoy configuration in heredocs.
job "billing" {
  datacenters = ["dc1", "dc2"]

  group "billing" {
    count = "2"

    network {
      mode = "bridge"

      port "http" {
        to = 8080
      }

      port "health" {}

      port "metrics" {}
    }

    service {
      name = "billing"
      port = "http"
      tags = ["api"]

      check {
        name     = "billing-health"
        type     = "http"
        path     = "/health"
        expose   = true
        interval = "10s"
        timeout  = "2s"

        check_restart {
          limit = 3
          grace = "30s"
        }
      }

      check {
        type     = "grpc"
        port     = "health"
        expose   = true
        interval = "15s"
        timeout  = "3s"
      }

      connect {
        sidecar_service {
          disable_default_tcp_check = true

          proxy {
            local_service_address = "127.0.0.1"

            expose {
              path {
                path            = "/metrics"
                protocol        = "http"
                local_path_port = 9102
                listener_port   = "metrics"
              }
            }

            upstreams {
              destination_name = "ledger"
              local_bind_port  = 7000
            }

            config {
              protocol = "http"

              envoy_public_listener_json = <<EOF
{
  "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
  "name": "public_listener",
  "address": {"socket_address": {"address": "0.0.0.0", "port_value": 21000}}
}
EOF

              envoy_extra_static_clusters_json = <<-EOT
                {
                  "name": "zipkin",
                  "type": "STRICT_DNS",
                  "connect_timeout": "5s"
                }
                EOT
            }
          }
        }

        sidecar_task {
          name   = "billing-proxy"
          driver = "raw_exec"
          user   = "nobody"

          config {
            command = "/usr/local/bin/envoy"
            args = [
              "-c", "${NOMAD_SECRETS_DIR}/envoy_bootstrap.json",
              "-l", "debug",
              "--concurrency", "2",
            ]
          }

          env = {
            "ENVOY_LOG.format" = "json"
          }

          resources {
            cpu    = 500
            memory = 256
          }

          logs {
            max_files     = 5
            max_file_size = 20
          }

          shutdown_delay = "10s"
          kill_timeout   = "15s"
          kill_signal    = "SIGINT"
        }
      }
    }

    task "billing" {
      driver = "raw_exec"

      config {
        command = "/opt/billing/bin/billing"
        args    = ["serve", "--port", "${NOMAD_PORT_http}"]
      }

      template {
        destination = "local/billing.env"
        env         = true
        data        = <<-EOT
          LEDGER_ADDR={{ env "NOMAD_UPSTREAM_ADDR_ledger" }}
          LOG_LEVEL=info
          EOT
      }
    }
  }
}
