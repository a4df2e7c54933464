# Spread blocks at job and group level, as Nomad writes them.
job "web" {
  datacenters = ["dc1", "dc2"]

  spread {
    attribute = "${node.datacenter}"
    weight    = 100

    target "dc1" {
      percent = 50
    }

    target "dc2" {
      percent = 50
    }
  }

  group "frontend" {
    count = 4

    spread {
      attribute = "${meta.rack}"
    }

    task "server" {
      driver = "raw_exec"

      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
    }
  }
}
