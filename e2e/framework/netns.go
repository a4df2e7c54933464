package framework

import (
	"context"
	"net/http"
	"os/exec"
	"time"

	"github.com/meshlet/meshlet/internal/netnsdial"
)

// command is the meshlet binary with args, run in the agent's network
// namespace when Options.NetNS set one.
func (a *Agent) command(ctx context.Context, args ...string) *exec.Cmd {
	if a.netns == "" {
		return exec.CommandContext(ctx, a.Bin, args...)
	}
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + a.netns, a.Bin}, args...)...)
}

// apiHTTPClient is the API clients' HTTP client: nil (theirs) on the
// host, one dialing into the agent's namespace otherwise.
func (a *Agent) apiHTTPClient() *http.Client {
	if a.netns == "" {
		return nil
	}
	// No overall timeout: blocking queries may outlast any fixed one.
	return &http.Client{Transport: a.transport()}
}

// HTTPClient returns a client that reaches the agent's loopback and host
// port mappings: the default client on the host, one whose connections
// are made inside Options.NetNS otherwise. Each call returns a new client
// (its idle connections are the caller's).
func (a *Agent) HTTPClient() *http.Client {
	if a.netns == "" {
		return &http.Client{Timeout: 30 * time.Second}
	}
	return &http.Client{Transport: a.transport(), Timeout: 30 * time.Second}
}

// transport dials inside the agent's namespace.
func (a *Agent) transport() *http.Transport {
	return &http.Transport{DialContext: netnsdial.New(a.netns).DialContext, MaxIdleConnsPerHost: 4,
		IdleConnTimeout: 30 * time.Second}
}
