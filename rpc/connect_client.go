package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/intention"
)

// The Client's mesh calls: the node's registrations, leaf signing and
// intention writes (FollowConnect, the feed, is in connect_stream.go).

var (
	_ ca.RemoteSigner  = (*Client)(nil)
	_ intention.Writer = connectIntentions{}
)

// PutAllocServices registers the service instances of one of the node's
// allocations, replacing what it had; each instance must name the node
// and the allocation.
func (c *Client) PutAllocServices(ctx context.Context, allocID string, insts []catalog.ServiceInstance) error {
	if allocID == "" {
		return fmt.Errorf("failed to register allocation services: %w: no allocation ID", ErrBadRequest)
	}
	if insts == nil {
		insts = []catalog.ServiceInstance{}
	}
	what := "register the services of allocation " + allocID
	return c.connectCall(ctx, what, http.MethodPut, pathConnectAlloc+url.PathEscape(allocID), connectAllocRequest{Instances: insts}, nil)
}

// DeleteAllocServices removes the registrations of one of the node's
// allocations (none registered is no error).
func (c *Client) DeleteAllocServices(ctx context.Context, allocID string) error {
	if allocID == "" {
		return fmt.Errorf("failed to deregister allocation services: %w: no allocation ID", ErrBadRequest)
	}
	what := "deregister the services of allocation " + allocID
	return c.connectCall(ctx, what, http.MethodDelete, pathConnectAlloc+url.PathEscape(allocID), nil, nil)
}

// SignCSR has the cluster's CA sign csrPEM as service's leaf; the servers
// sign only for services that the node runs. *Client is a ca.RemoteSigner.
func (c *Client) SignCSR(ctx context.Context, service, csrPEM string) (ca.SignedCert, error) {
	var out ca.SignedCert
	err := c.connectCall(ctx, "sign a leaf of service "+service, http.MethodPost, pathConnectSign,
		connectSignRequest{Service: service, CSR: csrPEM}, &out)
	if errors.Is(err, ErrForbidden) {
		return ca.SignedCert{}, fmt.Errorf("%w: %w", ca.ErrSignRefused, err)
	}
	if err != nil {
		return ca.SignedCert{}, err
	}
	return out, nil
}

// ConnectIntentions returns an intention.Writer over the servers: its
// errors wrap the intention package's sentinels (ErrExists, ErrNotFound,
// ErrInvalid) as the servers' store returned them, with the servers' text.
func (c *Client) ConnectIntentions() intention.Writer { return connectIntentions{c: c} }

// connectIntentions writes intentions through the servers.
type connectIntentions struct{ c *Client }

func (w connectIntentions) Upsert(ctx context.Context, in intention.Intention, replace bool) (intention.Intention, uint64, error) {
	return w.call(ctx, "write intention", connectIntentionRequest{Op: intentionOpUpsert, Intention: &in, Replace: replace})
}

func (w connectIntentions) Delete(ctx context.Context, src, dst string) (intention.Intention, uint64, error) {
	return w.call(ctx, "delete intention", connectIntentionRequest{Op: intentionOpDelete, Source: src, Destination: dst})
}

// DeleteByID does not send pre: the servers judge the caller's token
// (from ctx) on their state (intentionAllowed).
func (w connectIntentions) DeleteByID(ctx context.Context, id string, _ intention.Precondition) (intention.Intention, uint64, error) {
	return w.call(ctx, "delete intention", connectIntentionRequest{Op: intentionOpDeleteByID, ID: id})
}

// UpdateByID does not send pre: the servers judge the caller's token
// (from ctx) on their state (intentionAllowed).
func (w connectIntentions) UpdateByID(ctx context.Context, id string, in intention.Intention, _ intention.Precondition) (intention.Intention, uint64, error) {
	return w.call(ctx, "update intention", connectIntentionRequest{Op: intentionOpUpdateByID, ID: id, Intention: &in})
}

func (w connectIntentions) call(ctx context.Context, what string, req connectIntentionRequest) (intention.Intention, uint64, error) {
	var out connectIntentionResponse
	if err := w.c.connectCall(ctx, what, http.MethodPost, pathConnectIntentions, req, &out); err != nil {
		return intention.Intention{}, 0, err
	}
	return out.Intention, out.Index, nil
}

// remoteError is a server's refusal that keeps a sentinel: its text is
// the server's, so that the client agent's API answers as a server's.
type remoteError struct {
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// connectCall sends a mesh call to the servers, from the preferred one on,
// until one answers (Client.call; request.mesh maps the mesh refusals to
// their sentinels); a connection error, a timeout or a 5xx moves to the
// next. None needs the leader, so none is a write retried through an
// election.
func (c *Client) connectCall(ctx context.Context, what, method, path string, in, out any) error {
	if c.ctx.Err() != nil {
		return fmt.Errorf("failed to %s: %w", what, ErrClosed)
	}
	id, secret, err := c.identity()
	if err != nil {
		return err
	}
	var body []byte
	if in != nil {
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("failed to encode the call to %s: %w", what, err)
		}
	}
	req := &request{what: what, method: method, path: path, body: body, nodeID: id, secret: secret, timeout: c.cfg.Timeout, mesh: true}
	req.token, _ = acl.SecretFromContext(ctx)
	return c.call(ctx, req, out)
}

// ConnectRoots returns the cluster's public CA roots. Unlike the other
// mesh calls it needs no node identity (only the TLS client certificate):
// a client agent needs the trust domain before its node registers.
func (c *Client) ConnectRoots(ctx context.Context) (ca.Roots, error) {
	var out ca.Roots
	if c.ctx.Err() != nil {
		return out, fmt.Errorf("failed to read the CA roots: %w", ErrClosed)
	}
	req := &request{what: "read the CA roots", method: http.MethodGet, path: pathConnectRoots, timeout: c.cfg.Timeout, mesh: true}
	err := c.call(ctx, req, &out)
	return out, err
}

// connectAnswerError turns a failed answer into the call's error: the
// mesh calls' own codes into their sentinels, the rest as answerError.
func connectAnswerError(req *request, addr string, resp *http.Response, rd io.Reader) error {
	var sentinel error
	switch resp.Header.Get(headerErrorCode) {
	case codeIntentionExists:
		sentinel = intention.ErrExists
	case codeIntentionNotFound:
		sentinel = intention.ErrNotFound
	case codeIntentionInvalid:
		sentinel = intention.ErrInvalid
	case codeCAConflict:
		sentinel = ca.ErrStateConflict
	case codeConnectNotServed:
		return fmt.Errorf("failed to %s: %w by server %s", req.what, ErrConnectNotServed, addr)
	default:
		if sentinel = configSentinel(resp.Header.Get(headerErrorCode)); sentinel == nil {
			sentinel = aclSentinel(resp.Header.Get(headerErrorCode))
		}
		if sentinel == nil {
			return answerError(req, addr, resp, rd)
		}
	}
	var er errorResponse
	msg := sentinel.Error()
	if err := json.NewDecoder(io.LimitReader(rd, 64<<10)).Decode(&er); err == nil && er.Error != "" {
		msg = er.Error
	}
	return &remoteError{msg: msg, sentinel: sentinel}
}
