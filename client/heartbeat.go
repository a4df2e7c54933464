package client

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/meshlet/meshlet/structs"
)

// heartbeat keeps the node alive on the server: it heartbeats at the
// interval the server asks for (a little early, with jitter, as Nomad's
// clients do) and registers the node again when the server no longer
// knows it.
func (c *Client) heartbeat() {
	defer c.wg.Done()
	next := time.Duration(0)
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(next):
		}
		ttl, err := c.cfg.Server.Heartbeat(c.ctx, c.node.ID)
		if c.ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			// Half the interval, jittered, leaves room for a retry
			// before the server's grace runs out.
			next = ttl/2 + rand.N(ttl/4+1)
			continue
		case errors.Is(err, structs.ErrUnknownNode):
			c.logger.Warn("server does not know this node; registering again", "error", err)
			if rerr := c.cfg.Server.RegisterNode(c.ctx, c.Node()); rerr != nil {
				c.logger.Warn("failed to register node", "error", rerr)
			}
		default:
			c.logger.Warn("failed to heartbeat", "error", err)
		}
		next = retryDelay
	}
}

// registerWait bounds how long Start waits for a server to take the
// node's registration (a server electing its leader after a restart
// takes up to its lease TTL, 3 s) before it goes on and keeps trying in
// the background.
const registerWait = 15 * time.Second

// register registers the node, retrying with backoff for up to wait (0:
// until it succeeds or the client stops).
func (c *Client) register(wait time.Duration) error {
	deadline := time.Now().Add(wait)
	backoff := 100 * time.Millisecond
	for {
		err := c.cfg.Server.RegisterNode(c.ctx, c.Node())
		if err == nil || c.ctx.Err() != nil || (wait > 0 && time.Now().Add(backoff).After(deadline)) {
			return err
		}
		c.logger.Debug("node registration failed; retrying", "error", err, "after", backoff)
		select {
		case <-c.ctx.Done():
			return c.ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
