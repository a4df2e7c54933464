package configentry

import (
	"errors"
	"strings"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
)

func withUpstreams(u *consul.UpstreamConfiguration) *consul.ServiceConfigEntry {
	return &consul.ServiceConfigEntry{Kind: ServiceDefaults, Name: "web", UpstreamConfig: u}
}

func TestValidateUpstreamConfig(t *testing.T) {
	neg, big := -1, 5
	pct := uint32(101)
	negDur := -time.Second
	over := func(c consul.UpstreamConfig) *consul.ServiceConfigEntry {
		return withUpstreams(&consul.UpstreamConfiguration{Overrides: []*consul.UpstreamConfig{&c}})
	}
	def := func(c consul.UpstreamConfig) *consul.ServiceConfigEntry {
		return withUpstreams(&consul.UpstreamConfiguration{Defaults: &c})
	}
	for _, tc := range []struct {
		name string
		e    Entry
		want string
	}{
		{"defaults named", def(consul.UpstreamConfig{Name: "db"}), "UpstreamConfig.Defaults: Name, Namespace, Partition and Peer must be empty"},
		{"override unnamed", over(consul.UpstreamConfig{ConnectTimeoutMs: 5}), "UpstreamConfig.Overrides[0]: Name is required"},
		{"override wildcard", over(consul.UpstreamConfig{Name: "*"}), `Name "*" is not a valid service name`},
		{"override peer", over(consul.UpstreamConfig{Name: "db", Peer: "p"}), "cluster peering is not supported"},
		{"override namespace", over(consul.UpstreamConfig{Name: "db", Namespace: "ns"}), "only the default namespace"},
		{"duplicate", withUpstreams(&consul.UpstreamConfiguration{Overrides: []*consul.UpstreamConfig{{Name: "db"}, {Name: "db"}}}), `upstream "db" is overridden more than once`},
		{"protocol", over(consul.UpstreamConfig{Name: "db", Protocol: "udp"}), `Overrides[0] (db).Protocol "udp" is not one of`},
		{"timeout", def(consul.UpstreamConfig{ConnectTimeoutMs: -5}), "UpstreamConfig.Defaults.ConnectTimeoutMs must be >= 0"},
		{"escape hatch", def(consul.UpstreamConfig{EnvoyClusterJSON: "{}"}), "not supported"},
		{"negative limit", over(consul.UpstreamConfig{Name: "db", Limits: &consul.UpstreamLimits{MaxPendingRequests: &neg}}), "Limits.MaxPendingRequests must be between 0 and 4294967295, not -1"},
		{"negative connections", def(consul.UpstreamConfig{Limits: &consul.UpstreamLimits{MaxConnections: &neg}}), "Limits.MaxConnections must be"},
		{"negative requests", def(consul.UpstreamConfig{Limits: &consul.UpstreamLimits{MaxConcurrentRequests: &neg}}), "Limits.MaxConcurrentRequests must be"},
		{"interval", def(consul.UpstreamConfig{PassiveHealthCheck: &consul.PassiveHealthCheck{Interval: -time.Second}}), "PassiveHealthCheck.Interval -1s must be >= 0"},
		{"ejection time", def(consul.UpstreamConfig{PassiveHealthCheck: &consul.PassiveHealthCheck{BaseEjectionTime: &negDur}}), "BaseEjectionTime -1s must be >= 0"},
		{"percent", def(consul.UpstreamConfig{PassiveHealthCheck: &consul.PassiveHealthCheck{MaxEjectionPercent: &pct}}), "MaxEjectionPercent 101 must be a percentage between 0 and 100"},
		{"enforcing", def(consul.UpstreamConfig{PassiveHealthCheck: &consul.PassiveHealthCheck{EnforcingConsecutive5xx: &pct}}), "EnforcingConsecutive5xx 101 must be a percentage"},
	} {
		err := Validate(tc.e)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrInvalid containing %q", tc.name, err, tc.want)
		}
	}
	ok := withUpstreams(&consul.UpstreamConfiguration{
		Defaults:  &consul.UpstreamConfig{ConnectTimeoutMs: 100, Limits: &consul.UpstreamLimits{MaxConnections: &big}},
		Overrides: []*consul.UpstreamConfig{{Name: "db", Protocol: "HTTP", PassiveHealthCheck: &consul.PassiveHealthCheck{MaxFailures: 1}}},
	})
	if err := Validate(ok); err != nil {
		t.Fatalf("valid entry: %v", err)
	}
	if p := ok.UpstreamConfig.Overrides[0].Protocol; p != "http" {
		t.Errorf("override protocol = %q, want it normalized to http", p)
	}
}

// Consul's snake_case spelling in HCL, durations as strings.
func TestParseUpstreamConfigHCL(t *testing.T) {
	e, err := Parse("web.hcl", []byte(`
kind = "service-defaults"
name = "web"
local_connect_timeout_ms = 250
local_request_timeout_ms = 3000
upstream_config {
  defaults {
    connect_timeout_ms = 1000
    limits {
      max_connections = 10
      max_pending_requests = 5
      max_concurrent_requests = 20
    }
  }
  overrides = [
    {
      name = "db"
      passive_health_check {
        interval = "5s"
        max_failures = 2
        enforcing_consecutive_5xx = 100
        max_ejection_percent = 50
        base_ejection_time = "10s"
      }
    }
  ]
}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(e); err != nil {
		t.Fatal(err)
	}
	sd := e.(*consul.ServiceConfigEntry)
	if sd.LocalConnectTimeoutMs != 250 || sd.LocalRequestTimeoutMs != 3000 {
		t.Errorf("local timeouts = %d, %d", sd.LocalConnectTimeoutMs, sd.LocalRequestTimeoutMs)
	}
	d := sd.UpstreamConfig.Defaults
	if d.ConnectTimeoutMs != 1000 || d.Limits == nil || *d.Limits.MaxConnections != 10 || *d.Limits.MaxPendingRequests != 5 || *d.Limits.MaxConcurrentRequests != 20 {
		t.Errorf("defaults = %+v (limits %+v)", d, d.Limits)
	}
	o := sd.UpstreamConfig.Overrides
	if len(o) != 1 || o[0].Name != "db" || o[0].PassiveHealthCheck == nil {
		t.Fatalf("overrides = %+v", o)
	}
	p := o[0].PassiveHealthCheck
	if p.Interval != 5*time.Second || p.MaxFailures != 2 || *p.EnforcingConsecutive5xx != 100 || *p.MaxEjectionPercent != 50 || *p.BaseEjectionTime != 10*time.Second {
		t.Errorf("passive health check = %+v", p)
	}
}
