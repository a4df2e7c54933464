# Three tasks whose templates list tmpl-api's instances: one restarted on
# a change, one signalled (its trap records SIGHUP), one reading the count
# from an env template. Each records its starts in the shared alloc dir.
job "tmpl-consumer" {
  datacenters = ["dc1"]

  group "c" {
    task "restart" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo start >> ${NOMAD_ALLOC_DIR}/restart.starts; exec sleep 3600"]
      }

      template {
        data        = <<-EOT
          {{- range service "tmpl-api" }}
          {{ .Address }}:{{ .Port }}
          {{- end }}
          EOT
        destination = "local/api.txt"
        change_mode = "restart"
        splay       = "0s"
        perms       = "0640"

        wait {
          min = "500ms"
          max = "3s"
        }
      }
    }

    task "signal" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo start >> ${NOMAD_ALLOC_DIR}/signal.starts; trap 'echo hup >> ${NOMAD_ALLOC_DIR}/signal.hups' HUP; while :; do sleep 0.2; done"]
      }

      template {
        data          = "{{ range service \"tmpl-api\" }}{{ .Port }} {{ end }}\n"
        destination   = "${NOMAD_ALLOC_DIR}/ports.txt"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        splay         = "0s"

        wait {
          min = "500ms"
          max = "3s"
        }
      }
    }

    task "env" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"$API_COUNT $GREETING\" >> ${NOMAD_ALLOC_DIR}/env.seen; exec sleep 3600"]
      }

      template {
        data        = <<-EOT
          API_COUNT={{ len (service "tmpl-api") }}
          GREETING="hello from {{ env "NOMAD_TASK_NAME" }}"
          EOT
        destination = "secrets/app.env"
        env         = true
        splay       = "0s"

        wait {
          min = "500ms"
          max = "3s"
        }
      }
    }
  }
}
