# An ingress gateway group in bridge mode and nothing else: on a node whose
# connect_proxy driver tries the docker runtime first, meshlet injects
# connect-ingress-ingress-gw and runs it as the Envoy container. The test
# passes a free port.
variable "port" {
  type = number
}

job "ingress-gw" {
  datacenters = ["dc1"]

  group "gateway" {
    network {
      mode = "bridge"
      port "tcp" {
        static = var.port
        to     = var.port
      }
    }

    service {
      name = "ingress-gw"
      port = "${var.port}"

      connect {
        gateway {
          ingress {
            listener {
              port     = var.port
              protocol = "tcp"
              service {
                name = "count-api"
              }
            }
          }
        }
      }
    }
  }
}
