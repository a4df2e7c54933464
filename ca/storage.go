package ca

import (
	"context"
	"errors"
	"time"
)

// ErrStateConflict is returned by Storage.Save when the stored state is no
// longer the one the write was based on (another server changed it).
var ErrStateConflict = errors.New("CA state changed concurrently")

// Storage persists the CA's state: its cluster ID, its roots and their
// private keys. The directory storage (NewDirStorage) keeps one node's CA on
// disk; the cluster's servers keep it in etcd (package meshstate), where
// only servers can read the keys.
type Storage interface {
	// Load returns the stored state, or (nil, nil) when none was ever
	// stored. A state that was stored and is now lost or corrupt is an
	// error (ErrStateMissing, ErrStateCorrupt), never (nil, nil).
	Load(ctx context.Context) (*StoredState, error)
	// Save replaces the stored state with next when the stored state is
	// still prev (nil: nothing stored yet), comparing Revision; otherwise
	// it returns ErrStateConflict and changes nothing. On success
	// next.Revision is updated to the new revision.
	Save(ctx context.Context, prev, next *StoredState) error
}

// StoredState is the CA's persisted state. It holds private keys: never
// log it or send it to a client node.
type StoredState struct {
	ClusterID string
	Index     uint64
	Roots     []StoredRoot
	// Revision identifies the stored version for Save's comparison; it is
	// set by the Storage (etcd: the key's mod revision) and opaque to the CA.
	Revision int64 `json:"-"`
}

// StoredRoot is one root with its private key.
type StoredRoot struct {
	Root
	PrivateKeyPEM string
	RotatedOutAt  time.Time `json:",omitempty"`
}

// RemoteSigner signs leaf certificates for a CA in remote mode (a client
// agent): the key is generated locally and only the CSR leaves the node.
type RemoteSigner interface {
	// SignCSR asks the cluster's CA to sign csrPEM (a PEM "CERTIFICATE
	// REQUEST") as service's leaf.
	SignCSR(ctx context.Context, service, csrPEM string) (SignedCert, error)
}

// ErrSignRefused is wrapped by a RemoteSigner's error when the cluster's
// CA refused to sign for the service (the node does not run it).
var ErrSignRefused = errors.New("the cluster's CA refused to sign for this service")

// SignedCert is a leaf the cluster's CA signed from a CSR.
type SignedCert struct {
	// CertChainPEM is the leaf followed by any intermediate (a
	// cross-signed root during a rotation).
	CertChainPEM string
	// RootID is the ID of the root that signed it.
	RootID string
}
