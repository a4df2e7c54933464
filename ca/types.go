package ca

import "time"

// Roots is the set of trusted CA roots, in the shape of Consul's
// /v1/connect/ca/roots response.
type Roots struct {
	ActiveRootID string
	TrustDomain  string
	Roots        []Root
	// Index is this CA's index (Manager.Index) at the last change of the
	// set of roots or of the active root, at least every root's
	// ModifyIndex: it rises when a root is dropped, although no remaining
	// root's ModifyIndex does when the dropped root signed none of their
	// cross-signed certificates. 0 where not tracked (roots received from
	// elsewhere than a Manager).
	Index uint64 `json:",omitempty"`
}

// Root is one CA root. During a rotation several roots are trusted at once
// and the new root carries a certificate cross-signed by the old one in
// IntermediateCertsPEM.
type Root struct {
	ID                   string
	Name                 string
	SerialNumber         uint64
	SigningKeyID         string
	NotBefore            time.Time
	NotAfter             time.Time
	RootCertPEM          string
	IntermediateCertsPEM []string
	Active               bool
	CreateIndex          uint64
	ModifyIndex          uint64
}

// Leaf is a service's leaf certificate. CertPEM holds the leaf followed by
// any intermediates needed to chain to a trusted root. PrivateKeyPEM is
// secret: never log it or return it from an endpoint other than the leaf
// endpoint.
type Leaf struct {
	Service       string
	SpiffeID      string
	SerialNumber  string
	CertPEM       string
	PrivateKeyPEM string
	ValidAfter    time.Time
	ValidBefore   time.Time
	ModifyIndex   uint64
}

// EventKind says what changed in the CA.
type EventKind int

// Event kinds.
const (
	// EventRootsChanged: the trusted roots or the active root changed; every
	// leaf not signed by the active root is about to be re-issued.
	EventRootsChanged EventKind = iota + 1
	// EventLeafRenewed: Service's leaf was (re-)issued.
	EventLeafRenewed
)

// Event is passed to subscribers after a change. Subscribers must not block.
type Event struct {
	Kind    EventKind
	Service string
}
