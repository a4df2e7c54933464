package intention

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestCheckDoesNotWaitForPersist: while a write is stuck in persistence
// (encoding and fsync), Check, Match, Get and List answer from the
// previous state; the new state appears once the write is on disk.
func TestCheckDoesNotWaitForPersist(t *testing.T) {
	s := newStore(t, t.TempDir(), false, ixn("web", "db", "deny"))
	entered, release := make(chan struct{}), make(chan struct{})
	s.persist = func(dir string, list []*Intention, index uint64) error {
		close(entered)
		<-release
		return save(dir, list, index)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Upsert(ixn("web", "db", "allow"), true)
		done <- err
	}()
	<-entered
	answered := make(chan bool, 1)
	go func() {
		allowed, _ := s.Check("web", "db")
		_ = s.Match("destination", "db")
		_ = s.List()
		answered <- allowed
	}()
	select {
	case allowed := <-answered:
		if allowed {
			t.Fatal("Check saw the write before it was persisted")
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("Check blocked while a write was being persisted")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	if allowed, _ := s.Check("web", "db"); !allowed {
		t.Fatal("Check does not see the persisted write")
	}
}

func TestFailedPersistChangesNothing(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, false, ixn("web", "db", "allow"))
	notified := 0
	s.Subscribe(func() { notified++ })
	before, index := s.List(), s.Index()
	fileBefore, _ := os.ReadFile(filepath.Join(dir, fileName))
	errDisk := errors.New("disk full")
	s.persist = func(string, []*Intention, uint64) error { return errDisk }
	if _, err := s.Upsert(ixn("api", "db", "deny"), false); !errors.Is(err, errDisk) {
		t.Fatalf("Upsert: %v, want the persistence error", err)
	}
	if _, err := s.Upsert(ixn("web", "db", "deny"), true); !errors.Is(err, errDisk) {
		t.Fatalf("replace: %v, want the persistence error", err)
	}
	if err := s.Delete("web", "db"); !errors.Is(err, errDisk) {
		t.Fatalf("Delete: %v, want the persistence error", err)
	}
	fileAfter, _ := os.ReadFile(filepath.Join(dir, fileName))
	if !reflect.DeepEqual(s.List(), before) || s.Index() != index || notified != 0 || !bytes.Equal(fileBefore, fileAfter) {
		t.Fatalf("failed writes changed the store: %+v index %d, %d notifications", s.List(), s.Index(), notified)
	}
	if allowed, m := s.Check("web", "db"); !allowed || m == nil {
		t.Fatalf("Check after failed writes = %v, %v", allowed, m)
	}
}

func TestNewDirStartsFresh(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "intentions")
	s := newStore(t, dir, false)
	if len(s.List()) != 0 {
		t.Fatalf("fresh store holds %d intentions", len(s.List()))
	}
	for _, name := range []string{fileName, MarkerName} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("fresh store did not write %s: %v", name, err)
		}
	}
	// A restart on the initialized, still empty directory is fine.
	newStore(t, dir, false)
}

func TestLostStateRefused(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, false, ixn("*", "db", "deny"))
	good, _ := os.ReadFile(filepath.Join(dir, fileName))
	corrupt := bytes.Replace(good, []byte(`deny`), []byte(`allw`), 1)
	cases := []struct {
		name    string
		prepare func(path string) error
		want    error
	}{
		{"deleted", os.Remove, ErrStateMissing},
		{"empty", func(p string) error { return os.WriteFile(p, nil, 0o600) }, ErrStateCorrupt},
		{"truncated", func(p string) error { return os.WriteFile(p, good[:len(good)/2], 0o600) }, ErrStateCorrupt},
		{"checksum", func(p string) error { return os.WriteFile(p, corrupt, 0o600) }, ErrStateCorrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, fileName)
			if err := tc.prepare(path); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.WriteFile(path, good, 0o600) })
			_, err := New(dir, true, nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("New = %v, want %v", err, tc.want)
			}
			msg := err.Error()
			if !strings.Contains(msg, path) || !strings.Contains(msg, MarkerName) || strings.Contains(msg, "\n") {
				t.Fatalf("error does not name the file and the marker on one line: %q", msg)
			}
		})
	}
	if r := newStore(t, dir, false); !reflect.DeepEqual(r.List(), s.List()) {
		t.Fatal("restored file does not load")
	}
	// Removing the marker and the file is the documented way to start over.
	if err := os.Remove(filepath.Join(dir, MarkerName)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, fileName)); err != nil {
		t.Fatal(err)
	}
	if r := newStore(t, dir, false); len(r.List()) != 0 {
		t.Fatal("reset directory is not empty")
	}
}

// TestLoadsVersion1: files written before checksums load, get a marker,
// and are rewritten as version 2 at the next write.
func TestLoadsVersion1(t *testing.T) {
	dir := t.TempDir()
	v1 := `{"Version":1,"Index":4,"Intentions":[{"ID":"a","SourceName":"web","DestinationName":"db","Action":"allow"}]}`
	if err := os.WriteFile(filepath.Join(dir, fileName), []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, dir, false)
	if allowed, _ := s.Check("web", "db"); !allowed || s.Index() != 4 {
		t.Fatalf("version 1 file not loaded: index %d", s.Index())
	}
	if _, err := os.Stat(filepath.Join(dir, MarkerName)); err != nil {
		t.Fatalf("no marker after loading a version 1 file: %v", err)
	}
	if _, err := s.Upsert(ixn("api", "db", "allow"), false); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, fileName))
	if !bytes.Contains(b, []byte(`"Version": 2`)) || !bytes.Contains(b, []byte(`"SHA256"`)) {
		t.Fatalf("rewritten file is not version 2:\n%s", b)
	}
	if r := newStore(t, dir, false); len(r.List()) != 2 {
		t.Fatalf("reloaded %d intentions, want 2", len(r.List()))
	}
}

// BenchmarkCheckDuringWrites measures Check while another goroutine keeps
// writing (and fsyncing) intentions.
func BenchmarkCheckDuringWrites(b *testing.B) {
	s, err := New(b.TempDir(), false, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, in := range []Intention{ixn("web", "db", "allow"), ixn("*", "db", "deny"), ixn("api", "*", "allow")} {
		if _, err := s.Upsert(in, false); err != nil {
			b.Fatal(err)
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		actions := [2]string{"allow", "deny"}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.Upsert(ixn("cache", "db", actions[i%2]), true); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Check("web", "db")
		}
	})
	b.StopTimer()
	close(stop)
	<-done
}
