package sealedjson

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

type state struct {
	Index uint64
	Names []string
}

func TestRoundTrip(t *testing.T) {
	b, err := Marshal(state{Index: 7, Names: []string{"web", "db"}})
	if err != nil {
		t.Fatal(err)
	}
	var got state
	if err := Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Index != 7 || len(got.Names) != 2 || got.Names[1] != "db" {
		t.Fatalf("got %+v", got)
	}
}

func TestTamperingIsDetected(t *testing.T) {
	b, err := Marshal(state{Index: 7, Names: []string{"web"}})
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(b, []byte(`"web"`), []byte(`"wab"`), 1)
	if err := Unmarshal(edited, &state{}); !errors.Is(err, ErrChecksum) {
		t.Fatalf("edited state: err = %v, want ErrChecksum", err)
	}
	if err := Unmarshal(b[:len(b)/2], &state{}); err == nil {
		t.Fatal("a truncated file decoded")
	}
	if err := Unmarshal([]byte(`{"Version": 3}`), &state{}); err == nil || !strings.Contains(err.Error(), "unsupported version 3") {
		t.Fatalf("unknown version: err = %v", err)
	}
}

// Reformatting the file (indentation) keeps the checksum valid: it covers
// the compact state.
func TestWhitespaceDoesNotMatter(t *testing.T) {
	b, err := Marshal(state{Index: 1, Names: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	spaced := bytes.ReplaceAll(b, []byte("\n"), []byte("\n   "))
	if err := Unmarshal(spaced, &state{}); err != nil {
		t.Fatalf("reindented file: %v", err)
	}
}

func TestVersion1IsReadWhole(t *testing.T) {
	var got state
	if err := Unmarshal([]byte(`{"Version": 1, "Index": 3, "Names": ["x"]}`), &got); err != nil {
		t.Fatal(err)
	}
	if got.Index != 3 || got.Names[0] != "x" {
		t.Fatalf("got %+v", got)
	}
}
