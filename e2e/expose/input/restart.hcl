# check_restart: the http check fails while ${NOMAD_ALLOC_DIR}/unhealthy
# exists; after 2 failures in a row the client restarts the task.
job "restart" {
  datacenters = ["dc1"]

  group "web" {
    network {
      mode = "bridge"
    }

    restart {
      attempts = 3
      delay    = "1s"
      mode     = "fail"
    }

    service {
      name = "web"
      port = "8080"

      check {
        name     = "web-health"
        type     = "http"
        path     = "/health"
        interval = "1s"
        timeout  = "1s"

        check_restart {
          limit = 2
          grace = "1s"
        }
      }
    }

    task "web" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "hello", "-listen", "127.0.0.1:8080", "-id", "web", "-unhealthy-file", "${NOMAD_ALLOC_DIR}/unhealthy"]
      }
    }
  }
}
