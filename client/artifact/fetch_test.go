package artifact

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// entry is one archive member; link makes it a symbolic link.
type entry struct {
	name, body, link string
}

func tarGz(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gw)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		if e.link != "" {
			hdr = &tar.Header{Name: e.name, Mode: 0o777, Linkname: e.link, Typeflag: tar.TypeSymlink}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zipOf(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		w, err := zw.Create(e.name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gz(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	gw := gzip.NewWriter(&buf)
	if _, err := gw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// server serves files by path on 127.0.0.1 and records request headers.
type server struct {
	*httptest.Server
	mu      sync.Mutex
	headers []http.Header
}

func newServer(t *testing.T, files map[string][]byte) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.headers = append(s.headers, r.Header.Clone())
		s.mu.Unlock()
		switch r.URL.Path {
		case "/redirect-file":
			http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
			return
		case "/chunked":
			// No Content-Length: the limit must hold while reading.
			for range 64 {
				_, _ = w.Write(bytes.Repeat([]byte("x"), 1024))
				w.(http.Flusher).Flush()
			}
			return
		}
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
	}))
	t.Cleanup(s.Close)
	return s
}

func taskDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "task")
	if err := os.MkdirAll(filepath.Join(dir, "local"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func TestFetch(t *testing.T) {
	tgz := tarGz(t, entry{name: "bin/app", body: "app"}, entry{name: "conf/app.conf", body: "conf"})
	srv := newServer(t, map[string][]byte{
		"/plain.txt":  []byte("hello"),
		"/app.tar.gz": tgz,
		"/app.zip":    zipOf(t, entry{name: "z/one.txt", body: "one"}),
		"/data.gz":    gz(t, []byte("unzipped")),
	})
	tests := []struct {
		name  string
		req   Request
		files map[string]string // relative to the task dir
	}{
		{"plain file into local/", Request{Source: srv.URL + "/plain.txt"},
			map[string]string{"local/plain.txt": "hello"}},
		{"tar.gz unpacked", Request{Source: srv.URL + "/app.tar.gz"},
			map[string]string{"local/bin/app": "app", "local/conf/app.conf": "conf"}},
		{"zip unpacked", Request{Source: srv.URL + "/app.zip", Dest: "local/z-root"},
			map[string]string{"local/z-root/z/one.txt": "one"}},
		{"checksum ok", Request{Source: srv.URL + "/plain.txt", Options: map[string]string{"checksum": sha([]byte("hello"))}},
			map[string]string{"local/plain.txt": "hello"}},
		{"archive false keeps the archive", Request{Source: srv.URL + "/app.tar.gz", Options: map[string]string{"archive": "false"}},
			map[string]string{"local/app.tar.gz": string(tgz)}},
		{"mode file names the file", Request{Source: srv.URL + "/plain.txt", Mode: "file", Dest: "local/renamed"},
			map[string]string{"local/renamed": "hello"}},
		{"mode file gunzips", Request{Source: srv.URL + "/data.gz", Mode: "file", Dest: "local/data"},
			map[string]string{"local/data": "unzipped"}},
		{"mode dir unpacks", Request{Source: srv.URL + "/app.tar.gz", Mode: "dir", Dest: "/local/d"},
			map[string]string{"local/d/bin/app": "app"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := taskDir(t)
			tt.req.TaskDir = dir
			if tt.req.Dest == "" {
				tt.req.Dest = "local/"
			}
			if err := New(Config{}).Fetch(context.Background(), tt.req); err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			for rel, want := range tt.files {
				if got := readFile(t, filepath.Join(dir, rel)); got != want {
					t.Errorf("%s = %q, want %q", rel, got, want)
				}
			}
		})
	}
}

func TestFetchSendsHeaders(t *testing.T) {
	srv := newServer(t, map[string][]byte{"/a": []byte("a")})
	req := Request{Source: srv.URL + "/a", TaskDir: taskDir(t), Dest: "local/",
		Headers: map[string]string{"X-Token": "secret", "User-Agent": "meshlet-test"}}
	if err := New(Config{}).Fetch(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.headers) != 1 {
		t.Fatalf("%d requests, want 1 (no HEAD probe)", len(srv.headers))
	}
	if h := srv.headers[0]; h.Get("X-Token") != "secret" || h.Get("User-Agent") != "meshlet-test" {
		t.Errorf("headers = %v", h)
	}
}

func TestFetchFailures(t *testing.T) {
	outside := t.TempDir()
	big := bytes.Repeat([]byte("b"), 4096)
	srv := newServer(t, map[string][]byte{
		"/plain.txt": []byte("hello"),
		"/big.bin":   big,
		"/trav.tgz":  tarGz(t, entry{name: "ok.txt", body: "ok"}, entry{name: "../../escaped.txt", body: "x"}),
		"/link.tgz": tarGz(t, entry{name: "evil", link: outside},
			entry{name: "evil/planted.txt", body: "x"}),
		"/bomb.tgz":  tarGz(t, entry{name: "a", body: string(big)}, entry{name: "b", body: string(big)}),
		"/bomb.gz":   gz(t, bytes.Repeat([]byte{0}, 1<<16)),
		"/many.zip":  zipOf(t, entry{name: "1"}, entry{name: "2"}, entry{name: "3"}, entry{name: "4"}),
		"/bomb.zip":  zipOf(t, entry{name: "z", body: string(big) + string(big)}),
		"/small.tgz": tarGz(t, entry{name: "s", body: "s"}),
	})
	cfg := Config{MaxDownloadBytes: 2048, MaxExpandedBytes: 6000, MaxFiles: 3}
	tests := []struct {
		name    string
		req     Request
		wantErr error
		wantMsg string
	}{
		{"checksum mismatch", Request{Source: srv.URL + "/plain.txt", Options: map[string]string{"checksum": sha([]byte("other"))}},
			ErrChecksumMismatch, "checksums did not match: expected "},
		{"download over the limit", Request{Source: srv.URL + "/big.bin"}, ErrTooLarge, "4096 bytes, the limit is 2048"},
		{"chunked download over the limit", Request{Source: srv.URL + "/chunked"}, ErrTooLarge, "over 2048 bytes"},
		{"tar expansion over the limit", Request{Source: srv.URL + "/bomb.tgz"}, ErrTooLarge, "larger than limit"},
		{"gzip expansion over the limit", Request{Source: srv.URL + "/bomb.gz", Mode: "file", Dest: "local/bomb"}, ErrTooLarge, "more than 6000 bytes"},
		{"zip expansion over the limit", Request{Source: srv.URL + "/bomb.zip"}, ErrTooLarge, "larger than limit"},
		{"too many files", Request{Source: srv.URL + "/many.zip"}, ErrTooLarge, "too many files"},
		{"path traversal in an archive", Request{Source: srv.URL + "/trav.tgz"}, nil, "entry contains '..'"},
		{"link in an archive", Request{Source: srv.URL + "/link.tgz"}, nil, "not a directory"},
		{"redirect to file://", Request{Source: srv.URL + "/redirect-file"}, ErrRedirect, `to scheme "file"`},
		{"mode dir needs an archive", Request{Source: srv.URL + "/plain.txt", Mode: "dir"}, ErrNotArchive, "/plain.txt"},
		{"a URL ending in / is a directory", Request{Source: srv.URL + "/dir/"}, ErrNotArchive, ""},
		{"escaping destination", Request{Source: srv.URL + "/plain.txt", Dest: "local/../../x"}, ErrDestEscapes, ""},
		{"bad mode", Request{Source: srv.URL + "/plain.txt", Mode: "folder"}, ErrInvalidMode, ""},
		{"local file outside the roots", Request{Source: "/etc/hostname"}, ErrSourceNotAllowed, ""},
		{"file url outside the roots", Request{Source: "file:///etc/hostname"}, ErrSourceNotAllowed, ""},
		{"git getter", Request{Source: "git::https://127.0.0.1/r.git"}, nil, "error downloading"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := taskDir(t)
			tt.req.TaskDir = dir
			tt.req.FileRoots = []string{dir}
			if tt.req.Dest == "" {
				tt.req.Dest = "local/"
			}
			err := New(cfg).Fetch(context.Background(), tt.req)
			if err == nil {
				t.Fatal("Fetch succeeded")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %q does not wrap %q", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tt.wantMsg)
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 0 {
				t.Errorf("an archive wrote outside its destination: %v", entries)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escaped.txt")); err == nil {
				t.Error("an archive entry escaped the destination")
			}
		})
	}
}

// A link already on the destination's path is refused, never followed.
func TestFetchRefusesLinkedDestination(t *testing.T) {
	srv := newServer(t, map[string][]byte{"/a.txt": []byte("a")})
	dir, outside := taskDir(t), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "local", "out")); err != nil {
		t.Fatal(err)
	}
	err := New(Config{}).Fetch(context.Background(), Request{Source: srv.URL + "/a.txt", TaskDir: dir, Dest: "local/out/sub"})
	if !errors.Is(err, ErrSymlink) {
		t.Fatalf("error = %v, want ErrSymlink", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("wrote through the link: %v", entries)
	}
}

func TestFetchLocalSources(t *testing.T) {
	dir := taskDir(t)
	if err := os.WriteFile(filepath.Join(dir, "local", "in.tgz"), tarGz(t, entry{name: "x.txt", body: "local"}), 0o644); err != nil {
		t.Fatal(err)
	}
	// A link inside the root to a file outside is refused.
	if err := os.Symlink("/etc/hostname", filepath.Join(dir, "local", "host")); err != nil {
		t.Fatal(err)
	}
	f := New(Config{})
	req := Request{Source: "local/in.tgz", TaskDir: dir, Dest: "local/out", FileRoots: []string{dir}}
	if err := f.Fetch(context.Background(), req); err != nil {
		t.Fatalf("relative local source: %v", err)
	}
	if got := readFile(t, filepath.Join(dir, "local/out/x.txt")); got != "local" {
		t.Errorf("x.txt = %q", got)
	}
	req = Request{Source: "file://" + filepath.Join(dir, "local", "in.tgz"), Options: map[string]string{"archive": "false"},
		TaskDir: dir, Dest: "local/copy", FileRoots: []string{dir}}
	if err := f.Fetch(context.Background(), req); err != nil {
		t.Fatalf("file:// source: %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "local/copy/in.tgz")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("file:// source not copied as a regular file: %v %v", fi, err)
	}
	big := filepath.Join(dir, "local", "big.bin")
	if err := os.WriteFile(big, bytes.Repeat([]byte("x"), 100), 0o644); err != nil {
		t.Fatal(err)
	}
	req = Request{Source: big, TaskDir: dir, Dest: "local/bigcopy", FileRoots: []string{dir}}
	if err := New(Config{MaxDownloadBytes: 99}).Fetch(context.Background(), req); !errors.Is(err, ErrTooLarge) {
		t.Errorf("local file over the limit: error = %v, want ErrTooLarge", err)
	}
	req = Request{Source: "local/in.tgz", Mode: "dir", Options: map[string]string{"archive": "false"},
		TaskDir: dir, Dest: "local/d", FileRoots: []string{dir}}
	if err := f.Fetch(context.Background(), req); !errors.Is(err, ErrNotArchive) {
		t.Errorf("local file in mode dir, archive = false: error = %v, want ErrNotArchive", err)
	}
	req = Request{Source: "local", TaskDir: dir, Dest: "local/d2", FileRoots: []string{dir}}
	if err := f.Fetch(context.Background(), req); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("local directory: error = %v, want a directory error", err)
	}
	req = Request{Source: "local/host", Mode: "file", TaskDir: dir, Dest: "local/h", FileRoots: []string{dir}}
	if err := f.Fetch(context.Background(), req); !errors.Is(err, ErrSourceNotAllowed) {
		t.Errorf("link out of the root: error = %v, want ErrSourceNotAllowed", err)
	}
}

// insecure = true skips the certificate check; without it a self-signed
// server is refused.
func TestFetchInsecure(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("tls"))
	}))
	t.Cleanup(srv.Close)
	dir := taskDir(t)
	req := Request{Source: srv.URL + "/t.txt", TaskDir: dir, Dest: "local/"}
	if err := New(Config{}).Fetch(context.Background(), req); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("self-signed server without insecure: error = %v, want a certificate error", err)
	}
	req.Insecure = true
	if err := New(Config{}).Fetch(context.Background(), req); err != nil {
		t.Fatalf("insecure: %v", err)
	}
	if got := readFile(t, filepath.Join(dir, "local/t.txt")); got != "tls" {
		t.Errorf("t.txt = %q", got)
	}
}
