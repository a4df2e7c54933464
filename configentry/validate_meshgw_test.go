package configentry

import (
	"errors"
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"
)

// MeshGateway.Mode is checked (and lower-cased) in proxy-defaults,
// service-defaults and their upstream configs.
func TestValidateMeshGatewayMode(t *testing.T) {
	pd := func(mode string) *consul.ProxyConfigEntry {
		return &consul.ProxyConfigEntry{Kind: ProxyDefaults, Name: GlobalName, MeshGateway: consul.MeshGatewayConfig{Mode: consul.MeshGatewayMode(mode)}}
	}
	sd := func(mode string) *consul.ServiceConfigEntry {
		return &consul.ServiceConfigEntry{Kind: ServiceDefaults, Name: "web", MeshGateway: consul.MeshGatewayConfig{Mode: consul.MeshGatewayMode(mode)}}
	}
	up := func(mode string) *consul.ServiceConfigEntry {
		return withUpstreams(&consul.UpstreamConfiguration{Overrides: []*consul.UpstreamConfig{{Name: "api", MeshGateway: consul.MeshGatewayConfig{Mode: consul.MeshGatewayMode(mode)}}}})
	}
	for _, e := range []Entry{pd("local"), pd("REMOTE"), pd(""), sd("none"), sd("Local"), up("remote")} {
		if err := validate(e); err != nil {
			t.Errorf("%s/%s: %v", e.GetKind(), e.GetName(), err)
		}
	}
	if got := pd("REMOTE"); validate(got) != nil || got.MeshGateway.Mode != "remote" {
		t.Errorf("mode not normalized: %q", got.MeshGateway.Mode)
	}
	for _, tc := range []struct {
		e    Entry
		want string
	}{
		{pd("nearest"), `proxy-defaults/global: MeshGateway.Mode "nearest" is not one of`},
		{sd("both"), `service-defaults/web: MeshGateway.Mode "both" is not one of`},
		{up("far"), `UpstreamConfig.Overrides[0] (api).MeshGateway.Mode "far" is not one of`},
	} {
		err := validate(tc.e)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("validate = %v, want ErrInvalid containing %q", err, tc.want)
		}
	}
}
