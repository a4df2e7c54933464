# A docker task in a bridge allocation with Nomad's container options: the
# group network's hostname and dns block, and the task's extra_hosts,
# ulimit, readonly_rootfs, healthchecks, security_opt, init and pids_limit. The task prints
# what it sees (to alloc logs), then sleeps.
variable "image" {
  type    = string
  default = "meshlet-test/busybox:latest"
}

job "options" {
  group "g" {
    network {
      mode     = "bridge"
      hostname = "opts-${NOMAD_ALLOC_INDEX}"

      dns {
        servers  = ["192.0.2.53"]
        searches = ["grp.example"]
      }
    }

    task "t" {
      driver = "docker"

      config {
        image           = var.image
        command         = "sh"
        args            = ["-c", "cat /proc/sys/kernel/hostname /etc/resolv.conf; cat /etc/hosts; ulimit -n; echo pid1=$(tr '\\0' ' ' < /proc/1/cmdline); echo pids.max=$(cat /sys/fs/cgroup/pids.max /sys/fs/cgroup/pids/pids.max 2>/dev/null); (echo x > /f) 2>/dev/null || echo rootfs-ro; grep NoNewPrivs /proc/self/status; echo done; sleep 300"]
        extra_hosts     = ["db.internal:192.0.2.10"]
        readonly_rootfs = true
        security_opt    = ["no-new-privileges"]
        init            = true
        pids_limit      = 64

        ulimit {
          nofile = "1024:2048"
        }

        healthchecks {
          disable = true
        }
      }
    }
  }
}
