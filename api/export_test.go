package api

import "github.com/meshlet/meshlet/acl"

// Authorizer exports the enforcement seam to the package's external tests.
type Authorizer = authorizer

// WithAuthorizer makes enforcement ask f's answer instead of the resolved
// ACL, so that tests can grant permissions finer than the ACL skeleton's.
func WithAuthorizer(f func(*acl.ACL, *acl.Token) Authorizer) ServerOption {
	return func(s *Server) { s.authzOf = f }
}
