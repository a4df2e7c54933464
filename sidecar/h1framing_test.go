package sidecar

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// A head with both Content-Length and Transfer-Encoding is refused
// (errFramingConflict) however it is written, also when it is larger than
// the connection's buffer (scanned as net/http reads it); one with either
// alone is read.
func TestReadRequestFramingConflict(t *testing.T) {
	pad := "X-Pad: " + strings.Repeat("p", 2*h1BufferSize) + "\r\n"
	for _, tc := range []struct {
		name, head string
		conflict   bool
	}{
		{"both", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", true},
		{"te first, odd case", "POST / HTTP/1.1\r\nHost: a\r\ntransfer-ENCODING: chunked\r\ncontent-length: 5\r\n\r\n", true},
		{"bare lf", "POST / HTTP/1.1\nHost: a\nContent-Length: 5\nTransfer-Encoding: chunked\n\n", true},
		{"past the buffer", "POST / HTTP/1.1\r\nHost: a\r\n" + pad + "Content-Length: 5\r\n" + pad + "Transfer-Encoding: chunked\r\n\r\n", true},
		{"http/1.0", "POST / HTTP/1.0\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", true},
		{"length only", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n", false},
		{"chunked only, large", "POST / HTTP/1.1\r\nHost: a\r\n" + pad + "Transfer-Encoding: chunked\r\n\r\n", false},
		{"names in values", "POST / HTTP/1.1\r\nHost: a\r\nX-A: Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The body: a last chunk, then the next request's head,
			// which must not be scanned as this one's.
			raw := tc.head + "0\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"
			var sc reqScratch
			lim := headLimitReader{r: strings.NewReader(raw), n: -1, scan: &sc.scan}
			br := bufio.NewReaderSize(&lim, h1BufferSize)
			req, err := readRequest(br, &sc)
			if tc.conflict {
				if !errors.Is(err, errFramingConflict) {
					t.Fatalf("read = %v, want errFramingConflict", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			_, _ = io.Copy(io.Discard, req.Body)
			if _, err := readRequest(br, &sc); err != nil {
				t.Fatalf("next request: %v", err)
			}
		})
	}
}

// A smuggling attempt through the mesh: Content-Length covering a second
// request that Transfer-Encoding: chunked would leave for the next one.
// The proxy answers 400 and closes the connection; neither request
// reaches the app, with a small head or one larger than the buffer.
func TestHTTPMeshSmugglingRefused(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	m := newHTTPMesh(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path)
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	for _, pad := range []string{"", "X-Pad: " + strings.Repeat("p", 2*h1BufferSize) + "\r\n"} {
		hidden := "GET /hidden HTTP/1.1\r\nHost: api\r\n\r\n"
		body := "0\r\n\r\n" + hidden
		c, br := rawConn(t, m)
		fmt.Fprintf(c, "POST /front HTTP/1.1\r\nHost: api\r\n%sContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s", pad, len(body), body)
		resp, _ := readResp(t, br, http.MethodPost)
		if resp.StatusCode != http.StatusBadRequest || !resp.Close {
			t.Fatalf("pad %d: answered %d (close %v), want 400 and close", len(pad), resp.StatusCode, resp.Close)
		}
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Fatalf("pad %d: read after the answer = %v, want EOF", len(pad), err)
		}
	}
	// A request after them on a new connection is served: whatever the
	// app got is in seen by then.
	client := &http.Client{Timeout: waitTimeout}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Get(m.webURL() + "after")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != "/after" {
		t.Fatalf("app got %v, want only /after", seen)
	}
}
