package configentry

// Placeholder bodies; replaced by decode.go, validate.go and compile.go.

import (
	"fmt"


	"github.com/meshlet/meshlet/catalog"
)

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
