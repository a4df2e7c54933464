package acl

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Token types, as Nomad names them.
const (
	TypeClient     = "client"
	TypeManagement = "management"
)

// AnonymousPolicy is the name of the policy that applies to requests
// without a token (Nomad's and Consul's anonymous token): when no policy
// of that name exists they may do nothing.
const AnonymousPolicy = "anonymous"

// Sentinels. The HTTP layers map ErrTokenNotFound and ErrPermissionDenied
// to 403, ErrInvalid to 400, ErrNotFound to 404 and ErrBootstrapDone to
// 400 with Nomad's message.
var (
	// ErrTokenNotFound: a request's secret names no token (or an expired one).
	ErrTokenNotFound = errors.New("ACL token not found")
	// ErrPermissionDenied: the token's policies do not allow the request.
	ErrPermissionDenied = errors.New("Permission denied") //lint:ignore ST1005 Nomad's exact message
	// ErrNotFound: no policy or token (by accessor) of that name.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: a policy's rules or a token's fields are refused.
	ErrInvalid = errors.New("invalid ACL object")
	// ErrBootstrapDone: the one bootstrap was made already.
	ErrBootstrapDone = errors.New("ACL bootstrap already done")
	// ErrDisabled: ACLs are not enabled on this agent.
	ErrDisabled = errors.New("ACL support disabled")
)

// Token is an ACL token as stored. The secret is never stored: only its
// hash (HashSecret), by which requests find the token. SecretID is set
// only on the copy handed back by a create or a bootstrap, once.
type Token struct {
	AccessorID string
	SecretID   string `json:",omitempty"`
	SecretHash string
	Name       string
	Type       string // TypeClient or TypeManagement
	Policies   []string
	Global     bool
	// ServiceIdentities are Consul's service identities: each grants
	// write on its service and the service's sidecar proxy and read on
	// every service (ServiceIdentityRules).
	ServiceIdentities []*ServiceIdentity `json:",omitempty"`
	// AllocID and TaskName bind a workload token (a connect sidecar's
	// service identity, minted by the servers for that task) to its
	// allocation: the servers revoke it once the allocation has ended.
	AllocID        string `json:",omitempty"`
	TaskName       string `json:",omitempty"`
	CreateTime     time.Time
	ExpirationTime *time.Time `json:",omitempty"`
	CreateIndex    uint64
	ModifyIndex    uint64
}

// ServiceIdentity is one of a token's service identities (Consul's
// ACLServiceIdentity).
type ServiceIdentity struct {
	ServiceName string
	Datacenters []string `json:",omitempty"`
}

// serviceIdentityPolicyPrefix names the synthetic policy of a service
// identity; ':' keeps it apart from stored policy names.
const serviceIdentityPolicyPrefix = "service-identity:"

// ServiceIdentityRules is the policy a service identity grants, as
// Consul's synthetic policy: service:write on the service and on its
// sidecar proxy, service:read on every service. name must be a valid
// service name (the store checks it).
func ServiceIdentityRules(name string) string {
	return fmt.Sprintf("service %q { policy = \"write\" }\nservice %q { policy = \"write\" }\nservice_prefix \"\" { policy = \"read\" }\n",
		name, name+"-sidecar-proxy")
}

// serviceIdentityPolicies are the synthetic policies of tok's service
// identities.
func serviceIdentityPolicies(tok *Token) []*Policy {
	out := make([]*Policy, 0, len(tok.ServiceIdentities))
	for _, si := range tok.ServiceIdentities {
		if si == nil {
			continue
		}
		out = append(out, &Policy{Name: serviceIdentityPolicyPrefix + si.ServiceName, Rules: ServiceIdentityRules(si.ServiceName)})
	}
	return out
}

// Expired reports whether the token has an expiration time before now.
func (t *Token) Expired(now time.Time) bool {
	return t.ExpirationTime != nil && !now.Before(*t.ExpirationTime)
}

// Policy is a named ACL policy: Rules is its source in the policy
// language (Nomad's namespace/node/agent/operator rules plus Consul's
// service, service_prefix and mesh rules; see Parse).
type Policy struct {
	Name        string
	Description string
	Rules       string
	CreateIndex uint64
	ModifyIndex uint64
}

// HashSecret is the stored form of a token's secret: hex SHA-256. Secrets
// are random UUIDs (122 bits), so an unsalted fast hash is enough.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// NewSecret returns a new random secret (a UUID, as Nomad's SecretID).
func NewSecret() string { return uuid.NewString() }

// Reader is what resolving a request's token needs: servers read their
// own state, client agents ask a server (package rpc).
type Reader interface {
	// TokenBySecretHash returns the token whose secret hashes to hash,
	// or an error wrapping ErrTokenNotFound.
	TokenBySecretHash(ctx context.Context, hash string) (*Token, error)
	// Policies returns the named policies that exist (missing names
	// are skipped, as Nomad does for a token naming a deleted policy).
	Policies(ctx context.Context, names []string) ([]*Policy, error)
}

// Store is the servers' ACL state (tokens and policies). Writes set
// CreateIndex and ModifyIndex; list calls also return the ACL index for
// blocking queries. Errors wrap the sentinels above.
type Store interface {
	Reader
	// Bootstrap stores tok (a management token) if no bootstrap was
	// ever made, else fails with ErrBootstrapDone. It is atomic across
	// servers.
	Bootstrap(ctx context.Context, tok *Token) (*Token, error)
	UpsertPolicy(ctx context.Context, p *Policy) (*Policy, error)
	DeletePolicy(ctx context.Context, name string) error
	Policy(ctx context.Context, name string) (*Policy, error)
	ListPolicies(ctx context.Context) ([]*Policy, uint64, error)
	// UpsertToken creates t when its CreateIndex is 0 (with its
	// AccessorID if set, which must be unused) and updates the stored
	// token otherwise.
	UpsertToken(ctx context.Context, t *Token) (*Token, error)
	DeleteToken(ctx context.Context, accessorID string) error
	Token(ctx context.Context, accessorID string) (*Token, error)
	ListTokens(ctx context.Context) ([]*Token, uint64, error)
	// Index is the ACL index: it moves on every ACL write.
	Index(ctx context.Context) (uint64, error)
}
