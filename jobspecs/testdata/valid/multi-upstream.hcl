// A front end with several upstreams, variables and the string/number
// leniency real jobspecs rely on.
variable "image_tag" {
  type        = string
  default     = "1.4.2"
  description = "Tag of the web image"
}

variable "replicas" {
  type    = number
  default = 2
}

variable "dc" {
  default = "dc1"
}

job "storefront" {
  datacenters = [var.dc]
  type        = "service"
  priority    = "70" // a string where a number is expected

  meta = {
    owner        = "team-web"
    "cost.center" = 4711
  }

  group "web" {
    count = var.replicas

    network {
      mode = "bridge"

      port "http" {
        static = "8088" /* a number written as a string */
        to     = 8080
      }
      port "metrics" {
        to = -1
      }
    }

    service {
      name = "storefront"
      port = 8080 // becomes the port "8080"
      tags = ["web", "v${var.image_tag}"]

      meta {
        version = var.image_tag
      }

      connect {
        sidecar_service {
          tags = ["proxy"]

          proxy {
            local_service_port = "8080"

            upstreams {
              destination_name = "catalog-api"
              local_bind_port  = 9001
            }

            upstreams {
              destination_name   = "cart"
              local_bind_port    = "9002"
              local_bind_address = "127.0.0.2"
              datacenter         = "dc2"

              mesh_gateway {
                mode = "local"
              }

              config {
                connect_timeout_ms = 2500
                protocol           = "http"
                limits {
                  max_connections = 100
                }
              }
            }

            upstreams {
              destination_name = "payments-v2"
              local_bind_port  = 9003
            }

            config = {
              protocol             = "http"
              local_connect_timeout_ms = 1000
              bind_address         = "0.0.0.0"
            }
          }
        }
      }
    }

    service {
      name = "storefront-metrics"
      port = "metrics"
    }

    task "web" {
      driver = "exec"

      config {
        command = "/usr/local/bin/storefront"
        args = [
          "-listen", "127.0.0.1:8080",
          "-catalog", "http://${NOMAD_UPSTREAM_ADDR_catalog_api}",
          "-cart", "http://${NOMAD_UPSTREAM_ADDR_cart}/v1",
          "-payments", "${NOMAD_UPSTREAM_IP_payments_v2}:${NOMAD_UPSTREAM_PORT_payments_v2}",
          "-workers", 4,
        ]
      }

      env {
        IMAGE_TAG = var.image_tag
        REPLICAS  = var.replicas
        NODE_IP   = "${attr.unique.network.ip-address}"
      }

      resources {
        cpu        = "250"
        memory     = 256
        memory_max = 512
      }

      kill_timeout = "20s"
      kill_signal  = "SIGTERM"
    }
  }
}
