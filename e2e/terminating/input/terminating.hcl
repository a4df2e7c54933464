# A terminating gateway in front of a service outside the mesh: the
# "legacy" group runs an echo server with no sidecar and no service block
# (the test registers it as legacy-db through /v1/catalog/register at the
# allocation's bridge address); the gateway group has no task of its own
# (meshlet injects connect-terminating-tgw and a dynamic port for it);
# web reaches legacy-db through its upstream on 127.0.0.1:9191, which
# resolves to the gateway. legacy-tls is a TLS echo server the test runs
# inside the legacy allocation's namespace; the gateway originates TLS to
# it with the test's CA (CA_FILE, replaced by the test) and SNI.
job "terminating-e2e" {
  datacenters = ["dc1"]

  group "legacy" {
    network {
      mode = "bridge"
    }

    task "echo" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "0.0.0.0:9090"]
      }
    }
  }

  group "gateway" {
    network {
      mode = "bridge"
    }

    service {
      name = "tgw"

      connect {
        gateway {
          proxy {
            connect_timeout = "2s"
          }
          terminating {
            service {
              name = "legacy-db"
            }
            service {
              name    = "legacy-tls"
              ca_file = "CA_FILE"
              sni     = "legacy-tls.example"
            }
          }
        }
      }
    }
  }

  group "web" {
    network {
      mode = "bridge"
    }

    service {
      name = "web"
      port = "8080"

      connect {
        sidecar_service {
          proxy {
            upstreams {
              destination_name = "legacy-db"
              local_bind_port  = 9191
            }
            upstreams {
              destination_name = "legacy-tls"
              local_bind_port  = 9292
            }
          }
        }
      }
    }

    task "web" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "127.0.0.1:8080"]
      }
    }
  }
}
