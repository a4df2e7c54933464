# service-b speaks HTTP: its callers' upstream listeners route requests
# (service-router), split them (service-splitter) and pick subsets
# (service-resolver). A router or splitter needs this first.
Kind     = "service-defaults"
Name     = "service-b"
Protocol = "http"
