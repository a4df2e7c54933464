variable "port" {
  type = number
}

job "web" {
  priority = 500

  group "web" {
    count = "two"

    network {
      mode = "macvlan"
    }

    service {
      name = "web"
      port = "htp"

      check {
        type     = "https"
        interval = "500ms"
        timeout  = "1s"
        expose   = true
      }
    }

    task "web" {
      driver = "raw_exec"
      env    = ["A=b"]

      lifecycle {
        hook = "prestop"
      }

      config {
        port = var.port
      }
    }
  }
}
