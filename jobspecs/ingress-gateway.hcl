# An ingress gateway serving HTTPS with a certificate from the mesh CA
# (docs/jobspec.md, "TLS on ingress listeners"): the gateway's leaf gets
# the DNS SANs *.ingress.consul, *.ingress.dc1.consul and
# dashboard.example.com. Its http listener on 8443 routes
# dashboard.example.com to count-dashboard and every other mesh service of
# protocol http by <service>.ingress.* (the wildcard service); its grpc
# listener on 9443 takes gRPC (h2 over TLS) to grpc-b. Clients trust the
# mesh roots (/v1/agent/connect/ca/roots).
# Run it next to countdash.hcl and grpc.hcl with service-defaults
# Protocol = "http" for count-dashboard and "grpc" for grpc-b.
job "ingress-gateway" {
  datacenters = ["dc1"]

  group "gateway" {
    network {
      mode = "bridge"
      port "https" {
        static = 8443
        to     = 8443
      }
      port "grpcs" {
        static = 9443
        to     = 9443
      }
    }

    service {
      name = "ingress-gateway"
      port = "8443"

      connect {
        gateway {
          proxy {
            connect_timeout = "2s"
          }
          ingress {
            tls {
              enabled         = true
              tls_min_version = "TLSv1_2"
            }
            listener {
              port     = 8443
              protocol = "http"
              service {
                name  = "count-dashboard"
                hosts = ["dashboard.example.com"]
              }
              service {
                name = "*"
              }
            }
            listener {
              port     = 9443
              protocol = "grpc"
              service {
                name  = "grpc-b"
                hosts = ["grpc.example.com"]
              }
            }
          }
        }
      }
    }
  }
}
