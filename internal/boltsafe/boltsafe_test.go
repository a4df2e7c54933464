package boltsafe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/meshlet/meshlet/internal/boltsafe/boltsafetest"
)

var (
	errTestCorrupt = errors.New("test store corrupt")
	errTestLocked  = errors.New("test store locked")
)

var files = Files{
	Corrupt: func(path string, cause error) error { return fmt.Errorf("%w: %s: %w", errTestCorrupt, path, cause) },
	Locked:  func(path string) error { return fmt.Errorf("%w: %s", errTestLocked, path) },
}

// filled makes a bbolt file with enough data to span many pages.
func filled(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := files.Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("b"))
		if err != nil {
			return err
		}
		for i := 0; i < 2000; i++ {
			if err := b.Put([]byte(fmt.Sprintf("key-%05d", i)), make([]byte, 100)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestOpenRoundTrip(t *testing.T) {
	path := filled(t)
	db, err := files.Open(path, time.Second)
	if err != nil {
		t.Fatalf("reopen of a sound file: %v", err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket([]byte("b")).Get([]byte("key-01999")); len(v) != 100 {
			return fmt.Errorf("value = %d bytes", len(v))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// Damaged pages (whatever bbolt does with them: an error or a panic) are
// the store's corruption error, never a panic.
func TestDamageIsAnError(t *testing.T) {
	refused := 0
	for _, off := range []int64{0, 8192, 16384} {
		path := filled(t)
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		junk := make([]byte, 4096)
		for i := range junk {
			junk[i] = byte(i*7 + 13)
		}
		if _, err := f.WriteAt(junk, off); err != nil {
			t.Fatal(err)
		}
		if off == 0 { // both meta pages
			_, _ = f.WriteAt(junk, 4096)
		}
		f.Close()
		db, err := files.Open(path, time.Second)
		if err == nil {
			// A scribble on an unused page is no damage to report; the
			// data must then still read.
			db.Close()
			continue
		}
		refused++
		if !errors.Is(err, errTestCorrupt) {
			t.Errorf("damage at %d: err = %v, want the store's corruption error", off, err)
		}
	}
	if refused == 0 {
		t.Fatal("no damaged file was refused (the meta pages at offset 0 and 4096 were overwritten)")
	}
}

func TestLockedIsAnError(t *testing.T) {
	path := filled(t)
	db, err := files.Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = files.Open(path, 100*time.Millisecond)
	if !errors.Is(err, errTestLocked) {
		t.Fatalf("second open: err = %v, want the store's locked error", err)
	}
}

func TestRecoverTurnsPanicIntoError(t *testing.T) {
	err := func() (err error) {
		defer files.Recover("x.db", &err)
		panic("invalid page type: 0x7f")
	}()
	if !errors.Is(err, errTestCorrupt) {
		t.Fatalf("err = %v, want the store's corruption error", err)
	}
}

// TestWalkFileWithoutSyncedFreelist: a file written without a synced
// freelist (as etcd writes its database) with any page damaged is
// refused by Walk with the store's error; bbolt's own check would rebuild
// the freelist in a goroutine and crash the process on a bad page.
func TestWalkFileWithoutSyncedFreelist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("key"))
		if err != nil {
			return err
		}
		for i := 0; i < 2000; i++ {
			if err := b.Put([]byte(fmt.Sprintf("k-%05d", i)), make([]byte, 100)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || db.Close() != nil {
		t.Fatal(err)
	}
	if err := files.Walk(path, time.Second); err != nil {
		t.Fatalf("Walk of a sound file: %v", err)
	}
	refused := boltsafetest.EachPageDamaged(t, path, 7, errTestCorrupt, func() error { return files.Walk(path, time.Second) })
	t.Logf("%d damaged copies refused", refused)
}
