package meshstate

import (
	"context"
	"testing"
	"time"

	"github.com/meshlet/meshlet/catalog"
)

// holdWriter is an opWriter whose DeleteAlloc waits, once started, until
// release is closed; started is closed when the first delete begins.
type holdWriter struct {
	*opWriter
	started chan struct{}
	release chan struct{}
}

func (w *holdWriter) DeleteAlloc(ctx context.Context, id string) error {
	select {
	case <-w.started:
	default:
		close(w.started)
	}
	<-w.release
	return w.opWriter.DeleteAlloc(ctx, id)
}

// An allocation registered again, with the same registrations, while its
// delete is still under way is written again once the delete finishes
// (the servers would otherwise lack it until anti-entropy noticed).
func TestRegistrarRegisterDuringDelete(t *testing.T) {
	cat := catalog.New()
	w := &holdWriter{opWriter: newOpWriter(), started: make(chan struct{}), release: make(chan struct{})}
	// No mirror (its feed is down) and no full pass within the test.
	r := NewRegistrar(RegistrarConfig{Catalog: cat, Writer: w, SyncInterval: time.Hour})
	defer r.Stop()
	defer func() {
		select {
		case <-w.release:
		default:
			close(w.release)
		}
	}()
	r.Start()
	r.Register(inst("n1", "a1", "i1"))
	waitFor(t, "the first put", func() bool { p, _ := w.counts("a1"); return p == 1 })

	r.DeregisterAlloc("a1")
	select {
	case <-w.started:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the delete to start")
	}
	r.Register(inst("n1", "a1", "i1"))
	close(w.release)

	waitFor(t, "the allocation written again after its delete", func() bool {
		p, d := w.counts("a1")
		return d == 1 && p == 2
	})
	if got := w.lastPut("a1"); len(got) != 1 || got[0].ID != inst("n1", "a1", "i1").ID {
		t.Fatalf("last put = %+v, want the instance i1", got)
	}
}
