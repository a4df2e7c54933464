package acl

import "context"

type secretKey struct{}

// ContextWithSecret returns ctx carrying the secret of the request it
// serves, so that a write forwarded to the servers (a client agent's RPC)
// is judged again there with the caller's token, not the node's identity.
func ContextWithSecret(ctx context.Context, secret string) context.Context {
	return context.WithValue(ctx, secretKey{}, secret)
}

// SecretFromContext is the secret ContextWithSecret put in ctx; ok is
// false when none was (the anonymous token has secret "" and ok true).
func SecretFromContext(ctx context.Context) (secret string, ok bool) {
	secret, ok = ctx.Value(secretKey{}).(string)
	return secret, ok
}
