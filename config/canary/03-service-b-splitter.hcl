# The canary: 10 % of service-b's requests go to v2.
Kind = "service-splitter"
Name = "service-b"
Splits = [
  {
    Weight        = 90
    ServiceSubset = "v1"
  },
  {
    Weight        = 10
    ServiceSubset = "v2"
  },
]
