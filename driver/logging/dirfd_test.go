package logging

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/internal/nofollow"
)

// A task may swap something else in at a log file's name at any moment,
// a device node (mknod is among its capabilities) or a FIFO: openRegular
// must never open it for real, not even between its check and its open
// (a device's open runs its driver as root). The probe is a FIFO, whose
// open is observable: a writer blocked opening it returns once anything
// opens it for reading.
func TestOpenRegularNeverOpensASwappedInFile(t *testing.T) {
	d := t.TempDir()
	if err := os.WriteFile(filepath.Join(d, "web.stdout.0"), []byte("log\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(d, "swap"), 0o600); err != nil {
		t.Fatal(err)
	}
	anchor := filepath.Join(d, "anchor") // the FIFO under a name that never moves
	if err := os.Link(filepath.Join(d, "swap"), anchor); err != nil {
		t.Fatal(err)
	}
	opened := make(chan struct{})
	go func() {
		if f, err := os.OpenFile(anchor, os.O_WRONLY, 0); err == nil { // blocks until a reader opens
			f.Close()
		}
		close(opened)
	}()
	t.Cleanup(func() { // release the writer
		if f, err := os.OpenFile(anchor, os.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
			<-opened
			f.Close()
		}
	})
	dir, err := nofollow.OpenDir(d)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	var stop atomic.Bool
	swapped := make(chan struct{})
	defer func() { stop.Store(true); <-swapped }() // before dir.Close
	dfd := int(dir.Fd())
	// The swap itself must work here, or the test would prove nothing.
	for range 2 {
		if err := unix.Renameat2(dfd, "web.stdout.0", dfd, "swap", unix.RENAME_EXCHANGE); err != nil {
			close(swapped)
			t.Skipf("RENAME_EXCHANGE unsupported on this filesystem: %v", err)
		}
	}
	go func() {
		defer close(swapped)
		for !stop.Load() {
			_ = unix.Renameat2(dfd, "web.stdout.0", dfd, "swap", unix.RENAME_EXCHANGE)
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; i < 50000 && time.Now().Before(deadline); i++ {
		if f, err := openRegular(dir, "web.stdout.0", unix.O_RDONLY); err == nil {
			f.Close()
		}
		select {
		case <-opened:
			t.Fatalf("after %d opens openRegular opened the FIFO swapped in at the log's name", i+1)
		default:
		}
	}
}
