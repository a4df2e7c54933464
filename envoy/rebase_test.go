package envoy

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshlet/meshlet/internal/envoyvalidate"
)

func TestRelativeLocalAgent(t *testing.T) {
	unixJS, err := JSON(BootstrapConfig{ProxyID: "web-sidecar-proxy", GRPCAddr: "unix:///data/alloc/a1/alloc/run/meshlet_grpc.sock",
		ProxyConfig: map[string]any{KeyExtraStaticClusters: `{"name": "zipkin", "type": "STRICT_DNS", "connect_timeout": "5s",
			"per_connection_buffer_limit_bytes": 4294967295}`}})
	if err != nil {
		t.Fatal(err)
	}
	tcpJS, err := JSON(BootstrapConfig{ProxyID: "web-sidecar-proxy", GRPCAddr: "127.0.0.1:8502"})
	if err != nil {
		t.Fatal(err)
	}
	snake := `{"static_resources": {"clusters": [{"name": "other"}, {"name": "local_agent", "load_assignment": {"endpoints": [
		{"lb_endpoints": [{"endpoint": {"address": {"pipe": {"path": "/run/x/s.sock"}}}}]}]}}]}}`
	tests := []struct {
		name, in, wantDir, wantPath string
	}{
		{"client's bootstrap", string(unixJS), "/data/alloc/a1/alloc/run", "meshlet_grpc.sock"},
		{"proto field names", snake, "/run/x", "s.sock"},
		{"tcp address", string(tcpJS), "", ""},
		{"relative already", `{"staticResources": {"clusters": [{"name": "local_agent", "loadAssignment": {"endpoints": [
			{"lbEndpoints": [{"endpoint": {"address": {"pipe": {"path": "s.sock"}}}}]}]}}]}}`, "", ""},
		{"no local_agent", `{"node": {"id": "x"}}`, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, out, err := RelativeLocalAgent([]byte(tc.in))
			if err != nil || dir != tc.wantDir {
				t.Fatalf("dir %q, err %v; want %q", dir, err, tc.wantDir)
			}
			if tc.wantDir == "" {
				if string(out) != tc.in {
					t.Fatalf("unchanged bootstrap rewritten:\n%s", out)
				}
				return
			}
			if !strings.Contains(string(out), `"path": "`+tc.wantPath+`"`) || strings.Contains(string(out), tc.wantDir) {
				t.Fatalf("pipe path not made relative:\n%s", out)
			}
		})
	}
	// The client's bootstrap stays valid, escape hatches and big numbers
	// included.
	_, out, _ := RelativeLocalAgent(unixJS)
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(out, b); err != nil {
		t.Fatalf("rewritten bootstrap does not parse: %v\n%s", err, out)
	}
	if err := envoyvalidate.All(b); err != nil || len(b.StaticResources.Clusters) != 2 ||
		b.StaticResources.Clusters[1].PerConnectionBufferLimitBytes.GetValue() != 4294967295 {
		t.Fatalf("rewritten bootstrap: %v\n%s", err, out)
	}
	if _, _, err := RelativeLocalAgent([]byte("[1]")); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("a JSON list: %v, want ErrInvalidConfig", err)
	}
}

// TestMemFile: the copy reads back whole from its /dev/fd path (as a
// program the process executes would open it), survives in this process
// and cannot be changed.
func TestMemFile(t *testing.T) {
	data := bytes.Repeat([]byte(`{"node": {"id": "x"}}`), 10000)
	path, err := MemFile(data)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := strconv.Atoi(strings.TrimPrefix(path, "/dev/fd/"))
	if err != nil {
		t.Fatalf("path %q: %v", path, err)
	}
	defer unix.Close(fd)
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, %v; want %d", len(got), err, len(data))
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC != 0 {
		t.Fatalf("fd flags %#x, %v: want it inherited across exec", flags, err)
	}
	if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
		_, werr := f.Write([]byte("changed"))
		f.Close()
		if werr == nil {
			t.Fatal("the sealed bootstrap was written")
		}
	}
}
