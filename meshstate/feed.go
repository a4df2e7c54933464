package meshstate

import (
	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/intention"
)

// Batch is one step of the feed a mirror applies: the whole state (Reset)
// or what changed since the previous batch. It never carries a private key.
type Batch struct {
	// Revision is the etcd revision the batch brings the mirror to.
	Revision int64
	// Reset: the batch holds the whole state; drop everything not in it.
	Reset bool
	// Allocs are the allocations whose registrations changed; an entry
	// with nil Instances was deregistered.
	Allocs []AllocRegs `json:",omitempty"`
	// Intentions, when set, is the new state of the intentions.
	Intentions *intention.State `json:",omitempty"`
	// Roots, when set, are the CA's new public roots.
	Roots *ca.Roots `json:",omitempty"`
	// Config, when set, carries the config entries: all of them in a
	// Reset batch, else those that changed (see ConfigBatch).
	Config *ConfigBatch `json:",omitempty"`
}

// AllocRegs are one allocation's service registrations.
type AllocRegs struct {
	NodeID    string
	AllocID   string
	Instances []catalog.ServiceInstance
}
