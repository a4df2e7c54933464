# Two subsets of service-b, told apart by the service meta the jobspec
# sets (meta { version = "v1" }). Requests that name no subset go to v1.
Kind          = "service-resolver"
Name          = "service-b"
DefaultSubset = "v1"
Subsets = {
  v1 = {
    Filter = "Service.Meta.version == v1"
  }
  v2 = {
    Filter = "Service.Meta.version == v2"
  }
}
ConnectTimeout = "5s"
