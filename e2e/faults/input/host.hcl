# A host-mode job: a workload without a namespace, for state fault tests.
job "faults-host" {
  datacenters = ["dc1"]

  group "h" {
    task "h" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "127.0.0.1:0"]
      }
    }
  }
}
