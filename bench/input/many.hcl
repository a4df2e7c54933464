# Lifecycle benchmark: many allocations on one node. The harness runs it
# with mode = "bridge" (a namespace and CNI setup per allocation) and with
# mode = "host" (the baseline) and times job run until all are running.
variable "count" {
  type    = number
  default = 100
}

variable "mode" {
  type    = string
  default = "bridge"
}

job "bench-many" {
  datacenters = ["dc1"]

  group "idle" {
    count = var.count

    network {
      mode = var.mode
    }

    task "sleep" {
      driver = "raw_exec"

      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }

      # The node's fingerprinted capacity bounds placement as in Nomad:
      # 100 of Nomad's default 100 MHz / 300 MB would not fit on a 2-core
      # machine.
      resources {
        cpu    = 20
        memory = 32
      }
    }
  }
}
