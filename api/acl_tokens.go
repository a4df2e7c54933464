package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/acl"
)

// aclTokenCreate serves PUT /v1/acl/token: a new token with a
// server-generated AccessorID and SecretID; only this answer carries the
// secret.
func (s *Server) aclTokenCreate(r *http.Request) (any, uint64, error) {
	var req nomadapi.ACLToken
	if err := decodeBody(r, &req); err != nil {
		return nil, 0, err
	}
	if req.AccessorID != "" {
		return nil, 0, fmt.Errorf("%w: cannot specify AccessorID on create (PUT /v1/acl/token/:accessor uploads a token)", acl.ErrInvalid)
	}
	secret := acl.NewSecret()
	t, err := newToken(&req, uuid.NewString(), secret, time.Now())
	if err != nil {
		return nil, 0, err
	}
	stored, err := s.aclStore.UpsertToken(r.Context(), t)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to create ACL token: %w", err)
	}
	s.logger.Info("ACL token created", "accessor_id", stored.AccessorID, "type", stored.Type)
	return tokenOut(stored, secret), stored.ModifyIndex, nil
}

// aclTokenUpdate serves PUT /v1/acl/token/:accessor: an update of the
// token's name, policies and global flag, or, for an accessor no token
// has and a body carrying a SecretID, an upload of a client token with
// those IDs (nomad/api's Upload).
func (s *Server) aclTokenUpdate(r *http.Request) (any, uint64, error) {
	var req nomadapi.ACLToken
	if err := decodeBody(r, &req); err != nil {
		return nil, 0, err
	}
	accessor := r.PathValue("accessor")
	if req.AccessorID != "" && req.AccessorID != accessor {
		return nil, 0, fmt.Errorf("%w: token AccessorID %q does not match request path %q", acl.ErrInvalid, req.AccessorID, accessor)
	}
	cur, err := s.aclStore.Token(r.Context(), accessor)
	if errors.Is(err, acl.ErrNotFound) && req.SecretID != "" {
		return s.aclTokenUpload(r, &req, accessor)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("failed to read ACL token: %w", err)
	}
	upd, err := updatedToken(cur, &req)
	if err != nil {
		return nil, 0, err
	}
	stored, err := s.aclStore.UpsertToken(r.Context(), upd)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to update ACL token: %w", err)
	}
	s.logger.Info("ACL token updated", "accessor_id", stored.AccessorID)
	return tokenOut(stored, req.SecretID), stored.ModifyIndex, nil
}

// updatedToken applies an update to cur; the type, secret and expiration
// cannot change.
func updatedToken(cur *acl.Token, req *nomadapi.ACLToken) (*acl.Token, error) {
	typ := req.Type
	if typ == "" {
		typ = cur.Type
	}
	switch {
	case typ != cur.Type:
		return nil, fmt.Errorf("%w: cannot change a token's type", acl.ErrInvalid)
	case req.SecretID != "" && acl.HashSecret(req.SecretID) != cur.SecretHash:
		return nil, fmt.Errorf("%w: cannot change a token's SecretID", acl.ErrInvalid)
	case req.ExpirationTTL != 0 || (req.ExpirationTime != nil && !sameTime(req.ExpirationTime, cur.ExpirationTime)):
		return nil, fmt.Errorf("%w: cannot change a token's expiration", acl.ErrInvalid)
	}
	if err := validateToken(typ, req.Policies, req.Roles); err != nil {
		return nil, err
	}
	upd := *cur
	upd.SecretID = ""
	upd.Name, upd.Policies, upd.Global = req.Name, req.Policies, req.Global
	return &upd, nil
}

// aclTokenUpload stores a client token with the caller's AccessorID and
// SecretID (both UUIDs; the secret must be unused).
func (s *Server) aclTokenUpload(r *http.Request, req *nomadapi.ACLToken, accessor string) (any, uint64, error) {
	if _, err := uuid.Parse(accessor); err != nil {
		return nil, 0, fmt.Errorf("%w: AccessorID must be a UUID", acl.ErrInvalid)
	}
	if _, err := uuid.Parse(req.SecretID); err != nil {
		return nil, 0, fmt.Errorf("%w: SecretID must be a UUID", acl.ErrInvalid)
	}
	if req.Type == acl.TypeManagement {
		return nil, 0, fmt.Errorf("%w: management tokens cannot be uploaded", acl.ErrInvalid)
	}
	_, err := s.aclStore.TokenBySecretHash(r.Context(), acl.HashSecret(req.SecretID))
	switch {
	case err == nil:
		return nil, 0, fmt.Errorf("%w: SecretID is in use", acl.ErrInvalid)
	case !errors.Is(err, acl.ErrTokenNotFound):
		return nil, 0, fmt.Errorf("failed to look up ACL token: %w", err)
	}
	t, err := newToken(req, accessor, req.SecretID, time.Now())
	if err != nil {
		return nil, 0, err
	}
	stored, err := s.aclStore.UpsertToken(r.Context(), t)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to upload ACL token: %w", err)
	}
	s.logger.Info("ACL token uploaded", "accessor_id", stored.AccessorID)
	return tokenOut(stored, req.SecretID), stored.ModifyIndex, nil
}

// newToken builds a token to store from a create or upload request.
func newToken(req *nomadapi.ACLToken, accessor, secret string, now time.Time) (*acl.Token, error) {
	typ := req.Type
	if typ == "" {
		typ = acl.TypeClient
	}
	if err := validateToken(typ, req.Policies, req.Roles); err != nil {
		return nil, err
	}
	t := &acl.Token{AccessorID: accessor, SecretHash: acl.HashSecret(secret), Name: req.Name, Type: typ,
		Policies: req.Policies, Global: req.Global, CreateTime: now.UTC()}
	switch {
	case req.ExpirationTTL < 0:
		return nil, fmt.Errorf("%w: negative ExpirationTTL", acl.ErrInvalid)
	case req.ExpirationTTL > 0 && req.ExpirationTime != nil:
		return nil, fmt.Errorf("%w: set ExpirationTTL or ExpirationTime, not both", acl.ErrInvalid)
	case req.ExpirationTTL > 0:
		exp := t.CreateTime.Add(req.ExpirationTTL)
		t.ExpirationTime = &exp
	case req.ExpirationTime != nil:
		if !req.ExpirationTime.After(now) {
			return nil, fmt.Errorf("%w: ExpirationTime is in the past", acl.ErrInvalid)
		}
		exp := req.ExpirationTime.UTC()
		t.ExpirationTime = &exp
	}
	return t, nil
}

// validateToken applies Nomad's rules: a client token names policies, a
// management token none; roles are not supported.
func validateToken(typ string, policies []string, roles []*nomadapi.ACLTokenRoleLink) error {
	switch {
	case len(roles) > 0:
		return fmt.Errorf("%w: ACL roles are not supported", acl.ErrInvalid)
	case typ == acl.TypeClient && len(policies) == 0:
		return fmt.Errorf("%w: client token missing policies", acl.ErrInvalid)
	case typ == acl.TypeManagement && len(policies) > 0:
		return fmt.Errorf("%w: management token cannot be associated with policies", acl.ErrInvalid)
	case typ != acl.TypeClient && typ != acl.TypeManagement:
		return fmt.Errorf("%w: token type must be %q or %q", acl.ErrInvalid, acl.TypeClient, acl.TypeManagement)
	}
	return nil
}

// sameTime reports whether two optional times are equal.
func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}
