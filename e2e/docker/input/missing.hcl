# A docker task whose image is nowhere: the pull goes to a registry on
# 127.0.0.1 port 1, where nothing listens, so it fails at once (no
# traffic leaves the host) and the task fails with a clear event.
job "missing" {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "t" {
      driver = "docker"

      config {
        image              = "127.0.0.1:1/meshlet-e2e/missing:latest"
        image_pull_timeout = "20s"
      }
    }
  }
}
