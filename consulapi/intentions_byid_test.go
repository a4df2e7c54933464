//lint:file-ignore SA1019 these tests exercise the deprecated ID-based intention endpoints on purpose

package consulapi

import (
	"context"
	"net/http"
	"testing"

	consul "github.com/hashicorp/consul/api"

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

func (w *clusterWriter) UpdateByID(ctx context.Context, id string, in intention.Intention, pre intention.Precondition) (intention.Intention, uint64, error) {
	return w.done(w.srv.UpdateByIDCtx(ctx, id, in, pre))
}

// The legacy update (PUT /v1/connect/intentions/{id}), as the official
// client's IntentionUpdate sends it: the source, action and description
// change, the ID and creation stamps stay; the destination cannot change,
// nor can a source take a pair another intention holds.
func TestLegacyIntentionUpdate(t *testing.T) {
	f := newFixture(t)
	conn := f.client.Connect()
	id, _, err := conn.IntentionCreate(&consul.Intention{SourceName: "api", DestinationName: "cache", Action: consul.IntentionActionAllow}, nil)
	if err != nil {
		t.Fatal(err)
	}
	created, _, err := conn.IntentionGet(id, nil)
	if err != nil || created == nil {
		t.Fatalf("IntentionGet: %+v, %v", created, err)
	}

	up := *created
	up.SourceName, up.Action, up.Description = "web", consul.IntentionActionDeny, "no web to cache"
	if _, err := conn.IntentionUpdate(&up, nil); err != nil {
		t.Fatalf("IntentionUpdate: %v", err)
	}
	got, _, err := conn.IntentionGet(id, nil)
	if err != nil || got == nil {
		t.Fatalf("IntentionGet after update: %+v, %v", got, err)
	}
	if got.SourceName != "web" || got.Action != consul.IntentionActionDeny || got.Description != "no web to cache" ||
		!got.CreatedAt.Equal(created.CreatedAt) || got.CreateIndex != created.CreateIndex || got.ModifyIndex <= created.ModifyIndex {
		t.Fatalf("updated intention = %+v, created as %+v", got, created)
	}
	if n := len(f.ix.List()); n != 1 {
		t.Fatalf("store holds %d intentions after a rename, want 1", n)
	}

	// The answer is Consul's: {"ID": ...}.
	up.Action = consul.IntentionActionAllow
	var answer struct{ ID string }
	if _, err := f.client.Raw().Write("/v1/connect/intentions/"+id, &up, &answer, nil); err != nil || answer.ID != id {
		t.Fatalf("raw update answered %+v, %v", answer, err)
	}

	if _, _, err := conn.IntentionCreate(&consul.Intention{SourceName: "db", DestinationName: "cache", Action: consul.IntentionActionAllow}, nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(*consul.Intention)
		code int
	}{
		{"destination change", func(in *consul.Intention) { in.DestinationName = "db" }, http.StatusBadRequest},
		{"pair taken", func(in *consul.Intention) { in.SourceName = "db" }, http.StatusConflict},
		{"partial wildcard", func(in *consul.Intention) { in.SourceName = "we*" }, http.StatusBadRequest},
		{"permissions", func(in *consul.Intention) {
			in.Permissions = []*consul.IntentionPermission{{Action: consul.IntentionActionDeny, HTTP: &consul.IntentionHTTPPermission{PathPrefix: "/"}}}
		}, http.StatusBadRequest},
		{"unknown ID", func(in *consul.Intention) { in.ID = "8e3b1f0c-0000-4000-8000-000000000000" }, http.StatusNotFound},
	}
	for _, tc := range tests {
		bad := up
		tc.edit(&bad)
		if _, err := conn.IntentionUpdate(&bad, nil); statusCode(err) != tc.code {
			t.Errorf("%s: IntentionUpdate = %v, want %d", tc.name, err, tc.code)
		}
	}
	if got, _, _ := conn.IntentionGet(id, nil); got == nil || got.SourceName != "web" || got.DestinationName != "cache" || got.Action != consul.IntentionActionAllow {
		t.Fatalf("refused updates changed the intention: %+v", got)
	}
}

// An update by ID needs intention write on the destination, judged by the
// cluster's store on the intention it updates even when this agent's copy
// has not seen it yet.
func TestIntentionUpdateByIDACL(t *testing.T) {
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
	update := func(c *consul.Connect, id, src, dst string) error {
		_, err := c.IntentionUpdate(&consul.Intention{ID: id, SourceName: src, DestinationName: dst, Action: consul.IntentionActionDeny}, nil)
		return err
	}
	wantStatus(t, "team update of api => db", update(team, toDB.ID, "api", "db"), 403, "Permission denied")
	// Naming web in the body does not pass for the db intention stored.
	wantStatus(t, "team update of api => db as => web", update(team, toDB.ID, "api", "web"), 403, "Permission denied")
	if got, _ := f.ix.GetByID(toDB.ID); got.Action != intention.ActionAllow || got.DestinationName != "db" {
		t.Fatalf("refused updates changed api => db: %+v", got)
	}
	if err := update(team, toWeb.ID, "api", "web"); err != nil {
		t.Fatalf("team update of api => web: %v", err)
	}
	if got, _ := f.ix.GetByID(toWeb.ID); got.Action != intention.ActionDeny {
		t.Fatalf("api => web after the team's update: %+v", got)
	}
	mgmt := f.as(t, f.mgmt).Connect()
	wantStatus(t, "management moving api => db to web", update(mgmt, toDB.ID, "api", "web"), 400, "destination")
	if err := update(mgmt, toDB.ID, "api", "db"); err != nil {
		t.Fatalf("management update of api => db: %v", err)
	}
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
