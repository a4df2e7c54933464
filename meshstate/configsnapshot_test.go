package meshstate

import (
	"errors"
	"testing"
	"time"

	"github.com/meshlet/meshlet/configentry"
)

// Config entries are durable: a snapshot carries them, CheckDurable
// counts and checks them, a restore brings them back and moves the config
// index when they changed (mirrors see it), and leaves it when they did
// not.
func TestConfigEntriesSnapshotRestore(t *testing.T) {
	c, prefix, s, _ := meshFixture(t)
	ctx := ctxT(t, 20*time.Second)
	if _, _, err := s.PutConfigEntry(ctx, defaults(t, "web", "http"), nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutConfigEntry(ctx, defaults(t, "api", "grpc"), nil); err != nil {
		t.Fatal(err)
	}
	snap := durable(t, c, prefix)
	info, err := CheckDurable(snap)
	if err != nil || info.ConfigEntries != 2 || info.Intentions != 1 {
		t.Fatalf("CheckDurable = %+v, %v", info, err)
	}
	bad := map[string][]byte{}
	for k, v := range snap {
		bad[k] = v
	}
	bad["config/entries/service-defaults/web"] = []byte(`{"Kind":"service-defaults","Name":"api"}`)
	if _, err := CheckDurable(bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("CheckDurable of a misplaced entry = %v, want ErrInvalid", err)
	}
	delete(bad, "config/entries/service-defaults/web")
	bad["config/other"] = []byte("x")
	if _, err := CheckDurable(bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("CheckDurable of a stray config key = %v, want ErrInvalid", err)
	}

	// Nothing changed since: the restore keeps config/index as it is.
	live := durable(t, c, prefix)
	out, _, err := PrepareRestore(snap, live, false)
	if err != nil || string(out[configIndexKey]) != string(live[configIndexKey]) || len(configEntryKeys(out)) != 2 {
		t.Fatalf("PrepareRestore of the live state = %q, %v", out, err)
	}

	// Changes after the snapshot are undone by the restore, with a new index.
	if _, _, err := s.DeleteConfigEntry(ctx, configentry.Key{Kind: "service-defaults", Name: "web"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutConfigEntry(ctx, defaults(t, "db", "tcp"), nil); err != nil {
		t.Fatal(err)
	}
	_, before, _ := s.ConfigEntries(ctx)
	out, _, err = PrepareRestore(snap, durable(t, c, prefix), false)
	if err != nil {
		t.Fatal(err)
	}
	writeDurable(t, c, prefix, out)
	set, after, err := s.ConfigEntries(ctx)
	if err != nil || after <= before || set.Len() != 2 || set.Get("service-defaults", "web") == nil || set.Get("service-defaults", "db") != nil {
		t.Fatalf("after the restore: %v at %d (before %d), %v", set.List(""), after, before, err)
	}
	// And the store keeps working on the restored entries.
	if ok, _, err := s.PutConfigEntry(ctx, defaults(t, "db", "tcp"), nil); err != nil || !ok {
		t.Fatalf("write after the restore = %v, %v", ok, err)
	}
}
