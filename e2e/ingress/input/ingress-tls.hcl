# An ingress gateway serving TLS from the mesh CA (Consul's ingress TLS):
# the gateway's certificate names "*.ingress.consul",
# "*.ingress.dc1.consul" and the hosts of its services. Its http listener
# on HTTPS_PORT routes by Host header to web ("web.ingress.*" and
# "web.example.com"); its tcp listener on TLS_TCP_PORT forwards to db.
# Both take TLS 1.2 with two ECDSA AES-GCM suites, or TLS 1.3. The ports
# are replaced by the test with free ones.
job "ingress-tls-e2e" {
  datacenters = ["dc1"]

  group "gateway" {
    network {
      mode = "bridge"
      port "https" {
        static = HTTPS_PORT
        to     = HTTPS_PORT
      }
      port "tcps" {
        static = TLS_TCP_PORT
        to     = TLS_TCP_PORT
      }
    }

    service {
      name = "ingress-tls"
      port = "HTTPS_PORT"

      connect {
        gateway {
          ingress {
            tls {
              enabled         = true
              tls_min_version = "TLSv1_2"
              cipher_suites   = ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"]
            }
            listener {
              port     = HTTPS_PORT
              protocol = "http"
              service {
                name  = "web"
                hosts = ["web.example.com", "web.ingress.consul"]
              }
            }
            listener {
              port     = TLS_TCP_PORT
              protocol = "tcp"
              service {
                name = "db"
              }
            }
          }
        }
      }
    }
  }

  group "backends" {
    network {
      mode = "bridge"
    }

    service {
      name = "web"
      port = "8080"

      connect {
        sidecar_service {}
      }
    }

    service {
      name = "db"
      port = "9090"

      connect {
        sidecar_service {}
      }
    }

    task "web" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:8080", "-id", "web", "-any-path"]
      }
    }

    task "db" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "127.0.0.1:9090"]
      }
    }
  }
}
