package command

import (
	"errors"
	"flag"
	"net/http"
	"strings"

	nomadapi "github.com/hashicorp/nomad/api"
)

// The headers the agent's two APIs read the ACL token from, as Nomad and
// Consul name them.
const (
	nomadTokenHeader  = "X-Nomad-Token"
	consulTokenHeader = "X-Consul-Token"
)

// tokenFlag adds -token. Its default is empty on purpose: a default read
// from the environment would be printed by -h, and the token is a secret.
func (t *apiTarget) tokenFlag(fs *flag.FlagSet) {
	fs.StringVar(&t.Token, "token", "",
		"ACL token `SECRET` sent as "+t.tokenHeader+" (default: env "+strings.Join(t.tokenEnv, ", else ")+")")
}

// secret is the ACL token to send: -token, else the first of the
// target's variables that is set (MESHLET_TOKEN, then NOMAD_TOKEN for
// the Nomad-shaped API or CONSUL_HTTP_TOKEN for the connect API); "" sends
// none (the agent's anonymous policy applies).
func (t *apiTarget) secret() string {
	if t.Token != "" {
		return t.Token
	}
	return envOr("", t.tokenEnv...)
}

// withToken wraps base so that requests carry the target's token, unless
// there is none.
func (t *apiTarget) withToken(base http.RoundTripper) http.RoundTripper {
	secret := t.secret()
	if secret == "" {
		return base
	}
	return &tokenTransport{base: base, header: t.tokenHeader, secret: secret}
}

// tokenTransport sets an ACL token header on requests that lack one.
type tokenTransport struct {
	base   http.RoundTripper
	header string
	secret string
}

// RoundTrip implements http.RoundTripper; the caller's request is not
// modified.
func (tt *tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get(tt.header) == "" {
		r = r.Clone(r.Context())
		r.Header.Set(tt.header, tt.secret)
	}
	return tt.base.RoundTrip(r)
}

// describeACL is describe for t, plus where the CLI looks for a token when
// the agent refused a request that carried none.
func (t *apiTarget) describeACL(err error) string {
	msg := describe(err, t.Addr)
	var ure nomadapi.UnexpectedResponseError
	if errors.As(err, &ure) && ure.StatusCode() == http.StatusForbidden && t.secret() == "" {
		msg += " (no ACL token was sent: set -token or " + strings.Join(t.tokenEnv, " or ") + ")"
	}
	return msg
}
