package httpsrv

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestFilterLists(t *testing.T) {
	answers := map[string]string{
		"/list":   `[{"ID":"a","Status":"running","Service":{"Tags":["v1"]}},{"ID":"b","Status":"dead","Service":{"Tags":[]}},{"ID":"c"}]`,
		"/object": `{"ID":"a","Status":"running"}`,
	}
	h := FilterLists(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := answers[r.URL.Path]
		if !ok {
			http.Error(w, "no such thing", http.StatusNotFound)
			return
		}
		w.Header().Set("X-Nomad-Index", "7")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body+"\n")
	}))
	get := func(path, filter string) (int, string, http.Header) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path+"?filter="+url.QueryEscape(filter), nil))
		return rec.Code, strings.TrimSpace(rec.Body.String()), rec.Header()
	}
	tests := []struct {
		path, filter string
		code         int
		want         string
	}{
		{"/list", `Status == "running"`, 200, `[{"ID":"a","Status":"running","Service":{"Tags":["v1"]}}]`},
		{"/list", `"v1" not in Service.Tags`, 200, `[{"ID":"b","Status":"dead","Service":{"Tags":[]}}]`},
		{"/list", `ID matches "^[bc]$"`, 200, `[{"ID":"b","Status":"dead","Service":{"Tags":[]}},{"ID":"c"}]`},
		{"/list", `Status == "pending"`, 200, `[]`},
		{"/list", `Stauts == "running"`, 400, "filter expression matches no field of the answer"},
		{"/list", `this is (not valid`, 400, "failed to read filter expression"},
		{"/object", `Status == "running"`, 400, "filter expressions apply to list answers only"},
		{"/missing", `Status == "running"`, 404, "no such thing"},
		{"/list", ``, 200, answers["/list"]},
	}
	for _, tc := range tests {
		code, body, hdr := get(tc.path, tc.filter)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s filter %q = %d %q, want %d containing %q", tc.path, tc.filter, code, body, tc.code, tc.want)
		}
		if code == 200 && hdr.Get("X-Nomad-Index") != "7" {
			t.Errorf("GET %s filter %q lost the index header: %v", tc.path, tc.filter, hdr)
		}
	}
	// Writes are not filtered.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/list?filter=x", nil))
	if rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != answers["/list"] {
		t.Errorf("PUT with a filter = %d %q, want the answer unchanged", rec.Code, rec.Body.String())
	}
}
