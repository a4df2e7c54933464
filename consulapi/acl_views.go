package consulapi

import (
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/intention"
)

// Filtered views: list endpoints answer only what the caller may read, as
// Consul filters them. A view is a store wrapper; scoped gives a handler a
// copy of the server over the views of one caller.

// scoped returns a copy of s whose catalog, intentions and config entries
// show only what a may read.
func (s *Server) scoped(a authorizer) *Server {
	c := *s
	if c.d.Catalog != nil {
		c.d.Catalog = aclCatalog{Catalog: c.d.Catalog, a: a}
	}
	if c.d.Intentions != nil {
		c.d.Intentions = aclIntentions{Intentions: c.d.Intentions, a: a}
	}
	if c.d.ConfigEntries != nil {
		c.d.ConfigEntries = aclConfigEntries{ConfigEntries: c.d.ConfigEntries, a: a}
	}
	return &c
}

// aclCatalog lists only the services a may read.
type aclCatalog struct {
	Catalog
	a authorizer
}

// Services maps each service a may read to its tags.
func (c aclCatalog) Services() map[string][]string {
	out := map[string][]string{}
	for name, tags := range c.Catalog.Services() {
		if c.a.AllowServiceRead(name) {
			out[name] = tags
		}
	}
	return out
}

// aclIntentions lists only the intentions whose destination a may read.
type aclIntentions struct {
	Intentions
	a authorizer
}

// List returns the readable intentions.
func (v aclIntentions) List() []intention.Intention {
	return v.readable(v.Intentions.List())
}

// Match returns the readable intentions that match.
func (v aclIntentions) Match(by, name string) []intention.Intention {
	return v.readable(v.Intentions.Match(by, name))
}

func (v aclIntentions) readable(in []intention.Intention) []intention.Intention {
	out := make([]intention.Intention, 0, len(in))
	for _, i := range in {
		if v.a.AllowIntentionRead(i.DestinationName) {
			out = append(out, i)
		}
	}
	return out
}

// aclConfigEntries shows only the entries a may read.
type aclConfigEntries struct {
	ConfigEntries
	a authorizer
}

// Current returns the readable entries and the registry's index.
func (v aclConfigEntries) Current() (*configentry.Set, uint64) {
	set, index := v.ConfigEntries.Current()
	for _, e := range set.List("") {
		if !configentry.Allowed(v.a, e.GetKind(), e.GetName(), false) {
			set = set.Without(configentry.KeyOf(e))
		}
	}
	return set, index
}
