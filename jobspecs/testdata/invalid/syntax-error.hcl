job "web" {
  group "web" {
    count = = 2
  }
}
