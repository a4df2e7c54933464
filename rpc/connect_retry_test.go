package rpc

import (
	"context"
	"testing"
	"time"

	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/internal/tlsutil"
)

// lostAnswerConnect commits intention writes, then holds the answer until
// the caller gave up: a server whose answer is lost after the write.
type lostAnswerConnect struct{ *fakeConnect }

func (c lostAnswerConnect) Intentions() intention.Writer {
	return lostAnswerWriter{c.fakeConnect.Intentions()}
}

type lostAnswerWriter struct{ intention.Writer }

func (w lostAnswerWriter) Upsert(ctx context.Context, in intention.Intention, replace bool) (intention.Intention, uint64, error) {
	out, idx, err := w.Writer.Upsert(ctx, in, replace)
	<-ctx.Done()
	return out, idx, err
}

// A create whose first server committed it but timed out is sent to the
// next server, which finds the very intention asked for: that is the
// create's success, not ErrExists for the user's own write. A different
// intention in its place is still ErrExists, and so is a first-time
// duplicate (no retry).
func TestConnectIntentionCreateRetriedAfterCommit(t *testing.T) {
	m := newMeshFixture(t)
	ctx := ctxT(t, 10*time.Second)
	srvTLS, dial := m.p.serverTLSPair("slow")
	_, slow := startConnectServer(t, m.b, lostAnswerConnect{m.f}, srvTLS, dial, nil)
	c, err := NewClient(ClientConfig{Servers: []string{slow, m.addr}, TLS: m.p.clientTLS(tlsutil.RoleClient, "c1"),
		NodeID: "node-1", NodeSecret: "s1", Logger: testLogger(t), Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	in := intention.Intention{SourceName: "web", DestinationName: "db", Action: "Allow", Description: "web reads db"}
	got, idx, err := c.ConnectIntentions().Upsert(ctx, in, false)
	if err != nil {
		t.Fatalf("create retried after its first server committed it: %v", err)
	}
	m.f.mu.Lock()
	stored := append([]intention.Intention(nil), m.f.intents.Intentions...)
	m.f.mu.Unlock()
	if len(stored) != 1 || got.ID != stored[0].ID || idx != stored[0].ModifyIndex || got.Action != intention.ActionAllow {
		t.Fatalf("create = %+v, %d; stored %+v", got, idx, stored)
	}

	// Another intention for the pair (here: another action) stays a conflict.
	other := in
	other.SourceName, other.Action = "api", intention.ActionDeny
	if _, _, err := m.c.ConnectIntentions().Upsert(ctx, intention.Intention{SourceName: "api", DestinationName: "db", Action: intention.ActionAllow}, false); err != nil {
		t.Fatal(err)
	}
	_, _, err = c.ConnectIntentions().Upsert(ctx, other, false)
	wantErr(t, "retried create finding another intention", err, intention.ErrExists)

	// Without a lost answer, an identical duplicate is ErrExists as ever.
	_, _, err = m.c.ConnectIntentions().Upsert(ctx, in, false)
	wantErr(t, "duplicate create", err, intention.ErrExists)
}
