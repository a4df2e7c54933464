package httpsrv

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

type stub struct {
	ID      string
	Status  string
	Meta    map[string]string `json:",omitempty"`
	Service struct{ Tags []string }
}

func TestFilterAnswer(t *testing.T) {
	list := []*stub{{ID: "a", Status: "running", Meta: map[string]string{"owner": "x"}}, {ID: "b", Status: "dead"}, {ID: "c"}}
	list[0].Service.Tags = []string{"v1"}
	var got any
	var gotErr error
	h := FilterLists(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v any = list
		if r.URL.Path == "/object" {
			v = list[0]
		}
		got, gotErr = FilterAnswer(r, v)
	}))
	ids := func(v any) string {
		var out []string
		for _, s := range v.([]*stub) {
			out = append(out, s.ID)
		}
		return strings.Join(out, ",")
	}
	before := ids(list)
	tests := []struct {
		path, filter string
		want         string // IDs kept, or the error's text
		bad          bool
	}{
		{"/list", `Status == "running"`, "a", false},
		{"/list", `"v1" not in Service.Tags`, "b,c", false},
		{"/list", `ID matches "^[bc]$"`, "b,c", false},
		{"/list", `Meta is empty`, "b,c", false}, // the omitted (nil) maps are empty, as Nomad has it
		{"/list", `Status == "pending"`, "", false},
		{"/list", ``, "a,b,c", false},
		{"/list", `Stauts == "running"`, "matches no field of the answer", true},
		{"/object", `Status == "running"`, "list answers only", true},
	}
	for _, tc := range tests {
		got, gotErr = nil, nil
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path+"?filter="+url.QueryEscape(tc.filter), nil))
		switch {
		case tc.bad && (!errors.Is(gotErr, ErrBadFilter) || !strings.Contains(gotErr.Error(), tc.want)):
			t.Errorf("%s %q: error %v, want ErrBadFilter with %q", tc.path, tc.filter, gotErr, tc.want)
		case !tc.bad && (gotErr != nil || ids(got) != tc.want):
			t.Errorf("%s %q: kept %v (%v), want %s", tc.path, tc.filter, got, gotErr, tc.want)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/list?filter="+url.QueryEscape("this is (not valid"), nil))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "failed to read filter expression") {
		t.Errorf("a bad expression = %d %q, want 400", rec.Code, rec.Body.String())
	}
	if got := ids(list); got != before {
		t.Fatalf("FilterAnswer changed its input: %s, was %s", got, before)
	}
}

// An endpoint that answers 200 without applying the filter is refused
// rather than answering unfiltered; other answers pass.
func TestFilterGuard(t *testing.T) {
	h := FilterLists(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/unfiltered":
			_ = json.NewEncoder(w).Encode([]string{"a", "b"})
		case "/missing":
			http.Error(w, "no such thing", http.StatusNotFound)
		case "/filtered":
			v, _ := FilterAnswer(r, []string{})
			_ = json.NewEncoder(w).Encode(v)
		}
	}))
	for path, want := range map[string]int{"/unfiltered": 400, "/missing": 404, "/filtered": 200} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path+"?filter="+url.QueryEscape(`ID == "a"`), nil))
		if rec.Code != want || (want == 400 && !strings.Contains(rec.Body.String(), "does not support filter expressions")) {
			t.Errorf("GET %s with a filter = %d %q, want %d", path, rec.Code, rec.Body.String(), want)
		}
	}
}
