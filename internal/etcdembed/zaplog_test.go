package etcdembed

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"

	"github.com/meshlet/meshlet/internal/testutil"
)

func TestZapToHclog(t *testing.T) {
	closing := new(atomic.Bool)
	buf := &testutil.SyncBuffer{}
	hl := hclog.New(&hclog.LoggerOptions{Name: "etcd", Level: hclog.Trace, Output: buf})
	lg := newZapLogger(hl, hclog.Warn, closing).With(zap.String("local-member-id", "a1"))

	lg.Info("info is below warn")
	lg.Warn("slow fdatasync", zap.Duration("took", 2e9))
	lg.Error("apply failed", zap.Error(errors.New("boom")))
	lg.Warn("simple token is not cryptographically signed")
	lg.Warn("Failed to detect schema version", zap.Error(errors.New("missing term information")))
	lg.Error("setting up serving from embedded etcd failed.", zap.Error(errors.New("mux: server closed")))
	closing.Store(true)
	lg.Error("setting up serving from embedded etcd failed.", zap.Error(errors.New("http: Server closed")))

	out := buf.String()
	for _, want := range []string{
		`[WARN]  etcd: slow fdatasync: local_member_id=a1 took=2s`,
		`[ERROR] etcd: apply failed: error=boom local_member_id=a1`,
		`[ERROR] etcd: setting up serving from embedded etcd failed.: error="mux: server closed"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"info is below warn", "simple token", "schema version", "http: Server closed"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("logged %q:\n%s", unwanted, out)
		}
	}
}
