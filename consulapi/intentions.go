package consulapi

import (
	"errors"
	"net/http"
	"strings"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/intention"
)

// intentionBody is an intention as Consul clients send it. Fields meshlet
// does not support are decoded so that a request using them is rejected
// instead of silently losing them.
type intentionBody struct {
	ID                   string
	Description          string
	SourceNS             string
	SourceName           string
	DestinationNS        string
	DestinationName      string
	SourceType           string
	Action               string
	SourcePartition      string
	DestinationPartition string
	SourcePeer           string
	SourceSamenessGroup  string
	Permissions          []*intention.Permission
	Meta                 map[string]string
}

func (b intentionBody) toIntention() (intention.Intention, error) {
	switch {
	case len(b.Meta) > 0:
		return intention.Intention{}, badRequest("intention Meta is not supported")
	case b.SourcePeer != "" || b.SourceSamenessGroup != "":
		return intention.Intention{}, badRequest("peers and sameness groups are not supported")
	case !defaultPartition(b.SourcePartition) || !defaultPartition(b.DestinationPartition):
		return intention.Intention{}, badRequest("only the default partition is supported")
	}
	return intention.Intention{
		ID: b.ID, Description: b.Description, SourceType: b.SourceType, Action: b.Action, Permissions: b.Permissions,
		SourceNS: b.SourceNS, SourceName: b.SourceName, DestinationNS: b.DestinationNS, DestinationName: b.DestinationName,
	}, nil
}

func defaultPartition(p string) bool { return p == "" || p == "default" }

// parseName splits "[partition/][ns/]name" as consul/api sends it. Only the
// default namespace exists (as Upsert enforces): a name in another one is
// refused rather than answered for the same name in the default namespace.
func parseName(param, v string) (ns, name string, err error) {
	parts := strings.Split(v, "/")
	switch {
	case v == "":
		return "", "", badRequest("query parameter %q is required", param)
	case len(parts) == 1:
		return "", parts[0], nil
	case len(parts) == 2:
		ns, name = parts[0], parts[1]
	case len(parts) == 3 && defaultPartition(parts[0]):
		ns, name = parts[1], parts[2]
	default:
		return "", "", badRequest("invalid %s %q: want [partition/][namespace/]name with the default partition", param, v)
	}
	if ns != "" && ns != intention.DefaultNamespace {
		return "", "", badRequest("invalid %s %q: only the %q namespace is supported", param, v, intention.DefaultNamespace)
	}
	return ns, name, nil
}

// exactPair reads ?source=&destination=.
func exactPair(r *http.Request) (srcNS, src, dstNS, dst string, err error) {
	q := r.URL.Query()
	if srcNS, src, err = parseName("source", q.Get("source")); err != nil {
		return
	}
	dstNS, dst, err = parseName("destination", q.Get("destination"))
	return
}

func (s *Server) intentionsWait(r *http.Request) error {
	return s.block(r, s.d.Intentions.Index, s.d.Intentions.Subscribe)
}

// GET /v1/connect/intentions
func (s *Server) intentionList(w http.ResponseWriter, r *http.Request) {
	if err := s.intentionsWait(r); err != nil {
		s.failFor(w, r, err)
		return
	}
	index := s.d.Intentions.Index()
	s.writeJSON(w, r, index, s.d.Intentions.List())
}

// POST /v1/connect/intentions (legacy create): {"ID": ...}.
func (s *Server) intentionCreate(w http.ResponseWriter, r *http.Request) {
	var body intentionBody
	if err := decodeBody(r, &body); err != nil {
		s.failFor(w, r, err)
		return
	}
	if body.ID != "" {
		s.failFor(w, r, badRequest("ID must be empty when creating an intention"))
		return
	}
	in, err := body.toIntention()
	if err == nil {
		err = s.checkL7Protocol(in)
	}
	if err == nil {
		in, err = s.d.Intentions.UpsertCtx(r.Context(), in, false)
	}
	if err != nil {
		s.failFor(w, r, err)
		return
	}
	s.writeJSON(w, r, in.ModifyIndex, struct{ ID string }{in.ID})
}

// GET /v1/connect/intentions/exact?source=&destination= (blocking).
func (s *Server) intentionGetExact(w http.ResponseWriter, r *http.Request) {
	_, src, _, dst, err := exactPair(r)
	if err == nil {
		err = s.intentionsWait(r)
	}
	if err != nil {
		s.failFor(w, r, err)
		return
	}
	index := s.d.Intentions.Index()
	in, err := s.d.Intentions.Get(src, dst)
	s.writeIntention(w, r, index, in, err)
}

// writeIntention answers one intention read at index; a missing one is a
// 404 that carries the index too, so that a watcher can block on it.
func (s *Server) writeIntention(w http.ResponseWriter, r *http.Request, index uint64, in intention.Intention, err error) {
	if err != nil {
		if errors.Is(err, intention.ErrNotFound) {
			setIndex(w, index)
		}
		s.failFor(w, r, err)
		return
	}
	s.writeJSON(w, r, index, in)
}

// PUT /v1/connect/intentions/exact?source=&destination= (upsert): true.
func (s *Server) intentionPutExact(w http.ResponseWriter, r *http.Request) {
	srcNS, src, dstNS, dst, err := exactPair(r)
	if err != nil {
		s.failFor(w, r, err)
		return
	}
	var body intentionBody
	if err := decodeBody(r, &body); err != nil {
		s.failFor(w, r, err)
		return
	}
	if (body.SourceName != "" && body.SourceName != src) || (body.DestinationName != "" && body.DestinationName != dst) {
		s.failFor(w, r, badRequest("body names %s => %s differ from the query's %s => %s", body.SourceName, body.DestinationName, src, dst))
		return
	}
	in, err := body.toIntention()
	if err != nil {
		s.failFor(w, r, err)
		return
	}
	in.SourceName, in.DestinationName = src, dst
	if srcNS != "" {
		in.SourceNS = srcNS
	}
	if dstNS != "" {
		in.DestinationNS = dstNS
	}
	if err := s.checkL7Protocol(in); err != nil {
		s.failFor(w, r, err)
		return
	}
	saved, err := s.d.Intentions.UpsertCtx(r.Context(), in, true)
	if err != nil {
		s.failFor(w, r, err)
		return
	}
	s.writeJSON(w, r, saved.ModifyIndex, true)
}

// DELETE /v1/connect/intentions/exact?source=&destination=: idempotent,
// as in Consul (a pair without an intention is deleted already).
func (s *Server) intentionDeleteExact(w http.ResponseWriter, r *http.Request) {
	_, src, _, dst, err := exactPair(r)
	if err == nil {
		err = s.d.Intentions.DeleteCtx(r.Context(), src, dst)
	}
	if err != nil && !errors.Is(err, intention.ErrNotFound) {
		s.failFor(w, r, err)
		return
	}
	s.writeJSON(w, r, s.d.Intentions.Index(), true)
}

// GET /v1/connect/intentions/check?source=&destination=: {"Allowed": bool}
// as Consul answers, plus meshlet's "Reason". With meshlet's method=,
// path= and header=Name:Value (repeatable) it checks one HTTP request
// against L7 intentions and names the deciding permission.
func (s *Server) intentionCheck(w http.ResponseWriter, r *http.Request) {
	_, src, _, dst, err := exactPair(r)
	if err == nil {
		if st := r.URL.Query().Get("source-type"); st != "" && st != intention.SourceTypeConsul {
			err = badRequest("source-type %q is not supported", st)
		}
	}
	var req intention.Request
	var isHTTP bool
	if err == nil {
		req, isHTTP, err = checkRequestOf(r)
	}
	if err != nil {
		s.failFor(w, r, err)
		return
	}
	index := s.d.Intentions.Index()
	out := intentionCheckResponse{Permission: intention.NoPermission}
	var m *intention.Intention
	if isHTTP {
		out.Allowed, m, out.Permission = s.d.Intentions.CheckRequest(src, dst, req)
	} else {
		out.Allowed, m = s.d.Intentions.Check(src, dst)
	}
	out.Reason = explainCheck(src, dst, out.Allowed, m, out.Permission, isHTTP)
	s.writeJSON(w, r, index, out)
}

// GET /v1/connect/intentions/match?by=source|destination&name=...: name →
// intentions in evaluation order.
func (s *Server) intentionMatch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	by := q.Get("by")
	if by != "source" && by != "destination" {
		s.failFor(w, r, badRequest("query parameter \"by\" must be \"source\" or \"destination\", not %q", by))
		return
	}
	if len(q["name"]) == 0 {
		s.failFor(w, r, badRequest("query parameter \"name\" is required"))
		return
	}
	if err := s.intentionsWait(r); err != nil {
		s.failFor(w, r, err)
		return
	}
	index := s.d.Intentions.Index()
	out := map[string][]intention.Intention{}
	for _, raw := range q["name"] {
		_, name, err := parseName("name", raw)
		if err != nil {
			s.failFor(w, r, err)
			return
		}
		out[raw] = s.d.Intentions.Match(by, name)
	}
	s.writeJSON(w, r, index, out)
}

// GET /v1/connect/intentions/{id} (blocking).
func (s *Server) intentionGetID(w http.ResponseWriter, r *http.Request) {
	if err := s.intentionsWait(r); err != nil {
		s.failFor(w, r, err)
		return
	}
	index := s.d.Intentions.Index()
	in, err := s.d.Intentions.GetByID(r.PathValue("id"))
	s.writeIntention(w, r, index, in, err)
}

// PUT /v1/connect/intentions/{id} (legacy update): {"ID": ...}, as
// Consul answers. The path's ID names the intention (an ID in the body is
// ignored, as Consul ignores it); its source, action and description may
// change, its destination may not (400), and a source whose pair another
// intention holds is 409. As in Consul's legacy API, permissions cannot be
// set here. The caller's token is judged again on the stored intention by
// the store (intentionWritePre).
func (s *Server) intentionUpdateID(w http.ResponseWriter, r *http.Request) {
	var body intentionBody
	if err := decodeBody(r, &body); err != nil {
		s.failFor(w, r, err)
		return
	}
	if len(body.Permissions) > 0 {
		s.failFor(w, r, badRequest("Permissions must not be set when using the legacy APIs"))
		return
	}
	in, err := body.toIntention()
	if err == nil {
		in.ID = r.PathValue("id")
		in, err = s.d.Intentions.UpdateByIDCtx(r.Context(), in.ID, in, intentionWritePre(r))
	}
	if err != nil {
		s.failFor(w, r, err)
		return
	}
	s.writeJSON(w, r, in.ModifyIndex, struct{ ID string }{in.ID})
}

// DELETE /v1/connect/intentions/{id}: the caller's token is judged again
// on the intention the store deletes (intentionWritePre).
func (s *Server) intentionDeleteID(w http.ResponseWriter, r *http.Request) {
	if err := s.d.Intentions.DeleteByIDCtx(r.Context(), r.PathValue("id"), intentionWritePre(r)); err != nil {
		s.failFor(w, r, err)
		return
	}
	s.writeJSON(w, r, s.d.Intentions.Index(), true)
}

// intentionWritePre is the precondition of a write by ID with ACLs: the
// caller's token must allow intention write on the stored intention's
// destination. The store judges it on the state the write changes, not on
// this agent's copy, which may not hold the intention yet (the rule,
// intentionByID, lets an ID it does not know through to answer 404).
// Without ACLs it is nil.
func intentionWritePre(r *http.Request) intention.Precondition {
	id, ok := r.Context().Value(identityKey{}).(identity)
	if !ok {
		return nil
	}
	return func(stored intention.Intention) error {
		if !id.authz.AllowIntentionWrite(stored.DestinationName) {
			return acl.ErrPermissionDenied
		}
		return nil
	}
}
