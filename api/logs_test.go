package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
)

type getResult struct {
	status int
	index  string
	body   string
}

func httpGet(url string) (*getResult, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &getResult{resp.StatusCode, resp.Header.Get("X-Nomad-Index"), string(raw)}, nil
}

func decodeFrames(t *testing.T, body string) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(body))
	var out strings.Builder
	for {
		var f api.StreamFrame
		if err := dec.Decode(&f); err == io.EOF {
			return out.String()
		} else if err != nil {
			t.Fatalf("bad frame in %q: %v", body, err)
		}
		if f.File != "alloc/logs/app.stdout" {
			t.Fatalf("frame file = %q", f.File)
		}
		out.Write(f.Data)
	}
}

func TestLogs(t *testing.T) {
	fb := apitest.NewBackend()
	srv := newTestServer(t, fb)
	if _, err := fb.RegisterJob(context.Background(), testJob("web"), api.RegisterOptions{}); err != nil {
		t.Fatalf("register: %v", err)
	}
	fb.AppendTaskLog("app", "stdout", "line1\nline2\n")
	allocID := fb.Allocations()[0].ID
	base := srv.URL + "/v1/client/fs/logs/" + allocID[:8] + "?task=app&type=stdout"
	tests := []struct {
		name   string
		query  string
		plain  bool
		expect string
	}{
		{"frames from start", "", false, "line1\nline2\n"},
		{"plain from start", "&plain=true", true, "line1\nline2\n"},
		{"plain with offset", "&plain=true&offset=6", true, "line2\n"},
		{"frames from end", "&origin=end&offset=6", false, "line2\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := httpGet(base + tc.query)
			if err != nil || r.status != 200 {
				t.Fatalf("GET: %v %+v", err, r)
			}
			got := r.body
			if !tc.plain {
				got = decodeFrames(t, r.body)
			}
			if got != tc.expect {
				t.Fatalf("logs = %q, want %q", got, tc.expect)
			}
		})
	}
}

// TestLogsFollow: a follower receives data appended after it connected, and
// the stream ends when the client goes away.
func TestLogsFollow(t *testing.T) {
	fb := apitest.NewBackend()
	srv := newTestServer(t, fb)
	if _, err := fb.RegisterJob(context.Background(), testJob("web"), api.RegisterOptions{}); err != nil {
		t.Fatalf("register: %v", err)
	}
	fb.AppendTaskLog("app", "stdout", "first\n")
	allocID := fb.Allocations()[0].ID
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/client/fs/logs/"+allocID+"?task=app&type=stdout&follow=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(bufio.NewReader(resp.Body))
	var f api.StreamFrame
	if err := dec.Decode(&f); err != nil || string(f.Data) != "first\n" {
		t.Fatalf("first frame %q, %v", f.Data, err)
	}
	fb.AppendTaskLog("app", "stdout", "second\n")
	if err := dec.Decode(&f); err != nil || string(f.Data) != "second\n" || f.Offset != int64(len("first\nsecond\n")) {
		t.Fatalf("second frame %q offset %d, %v", f.Data, f.Offset, err)
	}
	cancel()
	if err := dec.Decode(&f); err == nil {
		t.Fatalf("stream continued after cancel: %+v", f)
	}
}
