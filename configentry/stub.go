package configentry

// Placeholder bodies; replaced by decode.go, validate.go and compile.go.

import (
	"encoding/json"
	"fmt"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
)

func decode(raw map[string]any) (Entry, error) {
	e, err := consul.DecodeConfigEntry(raw)
	if err != nil {
		return nil, invalidf("%v", err)
	}
	return e, nil
}

func parse(name string, src []byte) (Entry, error) {
	var raw map[string]any
	if err := json.Unmarshal(src, &raw); err != nil {
		return nil, invalidf("%s: %v", name, err)
	}
	return decode(raw)
}

func validate(e Entry) error {
	if !KnownKind(e.GetKind()) {
		return fmt.Errorf("%w: %q", ErrUnknownKind, e.GetKind())
	}
	return nil
}

func (s *Set) check(e Entry) error     { return validate(e) }
func (s *Set) checkDelete(k Key) error { return nil }
func (s *Set) protocol(string) string  { return ProtocolTCP }

func (s *Set) compile(service, dc string) (*Chain, error) {
	t := &Target{ID: service + ".default.default." + dc, Service: service, Datacenter: dc, ConnectTimeout: DefaultConnectTimeout}
	return &Chain{
		Service: service, Datacenter: dc, Protocol: s.protocol(service), Default: true,
		Routes:  []*Route{{Splits: []Split{{Weight: 100, TargetID: t.ID}}}},
		Targets: map[string]*Target{t.ID: t},
	}, nil
}

// MatchFilter reports whether a subset filter selects an instance.
func MatchFilter(filter string, inst catalog.ServiceInstance) (bool, error) {
	if filter == "" {
		return true, nil
	}
	return false, invalidf("filters are not implemented")
}
