//lint:file-ignore SA1019 these tests exercise the deprecated ID-based intention endpoints on purpose

package consulapi

import (
	"context"
	"testing"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/intention"
)

// clusterWriter is the cluster's side of a server agent's mirror, as etcd
// is: an authoritative Store that makes the writes and judges their
// preconditions on its own state. The mirror sees the cluster's state only
// after a write made through it; a write made on srv directly (another
// agent's) leaves the mirror behind.
type clusterWriter struct {
	srv    *intention.Store
	mirror *intention.Store
}

// withLaggingMirror serves the fixture's store (f.ix, the cluster's state)
// through a mirror of it that follows only its own writes.
func withLaggingMirror() Option {
	return func(s *Server) {
		w := &clusterWriter{srv: s.d.Intentions.(*intention.Store)}
		w.mirror = intention.NewMirror(w, false, nil)
		s.d.Intentions = w.mirror
	}
}

func (w *clusterWriter) done(in intention.Intention, err error) (intention.Intention, uint64, error) {
	if err != nil {
		return intention.Intention{}, 0, err
	}
	st := w.srv.State()
	return in, st.Index, w.mirror.Replace(st)
}

func (w *clusterWriter) Upsert(ctx context.Context, in intention.Intention, replace bool) (intention.Intention, uint64, error) {
	return w.done(w.srv.UpsertCtx(ctx, in, replace))
}

func (w *clusterWriter) Delete(ctx context.Context, src, dst string) (intention.Intention, uint64, error) {
	return w.done(intention.Intention{}, w.srv.DeleteCtx(ctx, src, dst))
}

func (w *clusterWriter) DeleteByID(ctx context.Context, id string, pre intention.Precondition) (intention.Intention, uint64, error) {
	return w.done(intention.Intention{}, w.srv.DeleteByIDCtx(ctx, id, pre))
}

// A delete by ID on an agent whose copy has not seen the intention yet
// (created through another server a moment ago) is judged on the
// intention the cluster deletes: the web team cannot delete an intention
// to db, while a truly unknown ID is still 404.
func TestIntentionDeleteByIDJudgedOnClusterState(t *testing.T) {
	f := newACLFixtureWith(t, func(a *acl.ACL) authorizer { return webTeam{a} }, withLaggingMirror())
	toDB, err := f.ix.Upsert(intention.Intention{SourceName: "api", DestinationName: "db", Action: "allow"}, false)
	if err != nil {
		t.Fatal(err)
	}
	toWeb, err := f.ix.Upsert(intention.Intention{SourceName: "api", DestinationName: "web", Action: "allow"}, false)
	if err != nil {
		t.Fatal(err)
	}
	team := f.as(t, f.team).Connect()

	_, err = team.IntentionDelete(toDB.ID, nil)
	wantStatus(t, "team delete of api => db", err, 403, "Permission denied")
	if _, err := f.ix.GetByID(toDB.ID); err != nil {
		t.Fatalf("the refused delete removed api => db: %v", err)
	}
	_, err = team.IntentionDelete("8e3b1f0c-0000-4000-8000-000000000000", nil)
	wantStatus(t, "team delete of an unknown ID", err, 404, "not found")

	if _, err := team.IntentionDelete(toWeb.ID, nil); err != nil {
		t.Fatalf("team delete of api => web: %v", err)
	}
	if _, err := f.as(t, f.mgmt).Connect().IntentionDelete(toDB.ID, nil); err != nil {
		t.Fatalf("management delete of api => db: %v", err)
	}
	if left := f.ix.List(); len(left) != 0 {
		t.Fatalf("cluster still holds %+v", left)
	}
}
