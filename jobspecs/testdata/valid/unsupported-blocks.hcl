# Blocks Nomad knows but meshlet does not run yet: each one parses and is
# reported as a warning at its position.
job "legacy" {
  datacenters = ["dc1"]
  all_at_once = false

  group "cache" {
    stop_after_client_disconnect = "5m"

    ephemeral_disk {
      size    = 300
      migrate = true
    }

    reschedule {
      attempts  = 3
      interval  = "1h"
      unlimited = false
    }

    volume "data" {
      type      = "host"
      source    = "cache-data"
      read_only = false
    }

    affinity {
      attribute = "${meta.rack}"
      value     = "r1"
      weight    = 50
    }

    migrate {
      max_parallel = 1
    }

    network {
      port "redis" {}
    }

    service {
      name                = "cache"
      port                = "redis"
      enable_tag_override = true

      check {
        type     = "tcp"
        interval = "10s"
        timeout  = "2s"
      }
    }

    service {
      name = "cache-native"
      port = "redis"

      connect {
        native = true
      }
    }

    task "redis" {
      driver = "podman"

      config {
        image = "docker.io/library/redis:7"
        ports = ["redis"]
      }

      artifact {
        source      = "https://example.invalid/redis.conf"
        destination = "local/"
      }

      vault {
        policies = ["cache"]
      }

      volume_mount {
        volume      = "data"
        destination = "/data"
      }
    }
  }
}
