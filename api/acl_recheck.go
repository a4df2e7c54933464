package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/meshlet/meshlet/acl"
)

// DefaultACLRecheck is how often the token of a long-lived request (an
// exec session, a followed log) is resolved again. With the resolver's
// token cache (acl.DefaultTokenTTL) a deleted or expired token loses its
// session within about the sum of the two.
const DefaultACLRecheck = 30 * time.Second

// aclRecheckTimeout bounds one recheck's resolution.
const aclRecheckTimeout = 10 * time.Second

// errNoLongerAuthorized is the cause of a long-lived request's context
// ended by whileAuthorized.
var errNoLongerAuthorized = errors.New("the request's ACL token was revoked or no longer allows it")

// WithACLRecheck sets how often the token of a long-lived request is
// resolved again (DefaultACLRecheck when zero or negative).
func WithACLRecheck(every time.Duration) ServerOption {
	return func(s *Server) { s.aclRecheck = every }
}

// whileAuthorized returns ctx, ended as well once r's token no longer
// allows r: every aclRecheck the token is resolved again and r's route
// rule, then allowed (when not nil), asked again. A deleted or expired
// token, or one that lost the permission, ends the context with cause
// errNoLongerAuthorized, so that an exec session or a followed log does
// not outlive a revocation. A token that cannot be resolved for another
// reason (the servers are unreachable from a client agent) keeps the
// request going: an outage must not cut sessions. Without ACLs ctx is
// only wrapped. stop ends the context and waits for the rechecks to end.
func (s *Server) whileAuthorized(ctx context.Context, r *http.Request, allowed func(authorizer) error) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	if !s.aclEnabled() {
		return ctx, func() { cancel(context.Canceled) }
	}
	every := s.aclRecheck
	if every <= 0 {
		every = DefaultACLRecheck
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := s.stillAuthorized(ctx, r, allowed); err != nil {
				s.logger.Info("ended a long-lived request: its ACL token no longer allows it",
					"method", r.Method, "path", r.URL.Path, "error", err)
				cancel(fmt.Errorf("%w: %w", errNoLongerAuthorized, err))
				return
			}
		}
	}()
	return ctx, func() { cancel(context.Canceled); <-done }
}

// stillAuthorized resolves r's token again and asks r's route rule and
// allowed; nil when they allow r or the token cannot be resolved for a
// reason other than its absence.
func (s *Server) stillAuthorized(ctx context.Context, r *http.Request, allowed func(authorizer) error) error {
	rctx, cancel := context.WithTimeout(ctx, aclRecheckTimeout)
	defer cancel()
	a, tok, err := s.aclRes.Resolve(rctx, requestSecret(r))
	switch {
	case errors.Is(err, acl.ErrTokenNotFound):
		return acl.ErrTokenNotFound
	case err != nil:
		return nil
	}
	authz := s.authzOf(a, tok)
	if rl := ruleFor(r.Pattern); rl.allow != nil && !rl.allow(authz, r) {
		return acl.ErrPermissionDenied
	}
	if allowed != nil {
		return allowed(authz)
	}
	return nil
}
