# /admin and requests carrying "x-canary: 1" always reach v2; everything
# else goes through the splitter, retried on 503 (up to 3 times) so that a
# flaky instance stays hidden.
Kind = "service-router"
Name = "service-b"
Routes = [
  {
    Match {
      HTTP {
        PathPrefix = "/admin"
      }
    }
    Destination {
      ServiceSubset = "v2"
    }
  },
  {
    Match {
      HTTP {
        Header = [
          {
            Name  = "x-canary"
            Exact = "1"
          },
        ]
      }
    }
    Destination {
      ServiceSubset = "v2"
    }
  },
  {
    Match {
      HTTP {
        PathPrefix = "/"
      }
    }
    Destination {
      Service            = "service-b"
      NumRetries         = 3
      RetryOnStatusCodes = [503]
    }
  },
]
