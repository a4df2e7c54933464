# An ingress gateway group in bridge mode and nothing else: on a node whose
# connect_proxy driver tries the docker runtime first, meshlet injects
# connect-ingress-ingress-gw and runs it as the Envoy container. PORT is
# replaced by the test with a free port.
job "ingress-gw" {
  datacenters = ["dc1"]

  group "gateway" {
    network {
      mode = "bridge"
      port "tcp" {
        static = PORT
        to     = PORT
      }
    }

    service {
      name = "ingress-gw"
      port = "PORT"

      connect {
        gateway {
          ingress {
            listener {
              port     = PORT
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
