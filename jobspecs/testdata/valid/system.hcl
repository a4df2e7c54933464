# A system job: one allocation of the group on every eligible node.
job "node-agent" {
  datacenters = ["dc1"]
  type        = "system"

  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }

  group "agent" {
    restart {
      attempts = 3
      delay    = "10s"
    }

    task "agent" {
      driver = "exec"

      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }

      resources {
        cpu    = 20
        memory = 32
      }
    }
  }
}
