# A batch job with lifecycle hooks, locals, functions, constraints and
# HCL1-style quoted keys in env and meta blocks.
locals {
  app     = "reporter"
  version = "2.1"
  label   = format("%s-%s", local.app, local.version)
}

job "nightly-report" {
  type        = "batch"
  region      = "eu"
  namespace   = "reports"
  datacenters = ["dc1"]

  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }

  update {
    max_parallel     = 1
    min_healthy_time = "10s"
    healthy_deadline = "5m"
    auto_revert      = true
  }

  group "report" {
    restart {
      attempts = 1
      interval = "1h"
      delay    = "30s"
      mode     = "delay"
    }

    constraint {
      distinct_hosts = true
    }

    shutdown_delay = "5s"

    task "setup" {
      driver = "raw_exec"

      lifecycle {
        hook    = "prestart"
        sidecar = false
      }

      config {
        command = "/bin/mkdir"
        args    = ["-p", "${NOMAD_ALLOC_DIR}/out"]
      }
    }

    task "report" {
      driver = "exec"
      leader = true

      config {
        command = "/usr/bin/env"
        args    = ["${upper(local.app)}", "--label", local.label]
      }

      env {
        "REPORT.FORMAT" = "csv"
        "app.name"      = local.app
        PLAIN           = "yes"
      }

      meta {
        "team.owner" = "data"
      }

      restart {
        attempts = 0
      }

      logs {
        max_files     = 2
        max_file_size = 1
        disabled      = false
      }
    }

    task "ship" {
      driver = "raw_exec"

      lifecycle {
        hook = "poststop"
      }

      config {
        command = "/bin/true"
      }
    }
  }
}
