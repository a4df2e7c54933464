// Package boltsafetest damages bbolt files for the tests of the stores that
// open them through boltsafe.
package boltsafetest

import (
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// PageSize is the bbolt page size of the files the stores write.
const PageSize = 4096

// EachPageDamaged overwrites each page of the bbolt file at path in turn
// with random bytes (from seed) and calls openAndRead, which opens the
// store, reads it and closes it. A panic escaping openAndRead, or an error
// that does not wrap want, is not one line or does not name path, fails
// the test, as does no damaged page being refused at all. It returns how
// many damaged files were refused; path holds the last damaged copy.
func EachPageDamaged(t *testing.T, path string, seed uint64, want error, openAndRead func() error) int {
	t.Helper()
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, seed+1))
	refused := 0
	for p := 0; p < len(orig)/PageSize; p++ {
		buf := append([]byte(nil), orig...)
		for i := p * PageSize; i < (p+1)*PageSize; i++ {
			buf[i] = byte(rng.Uint32())
		}
		if err := os.WriteFile(path, buf, 0o600); err != nil {
			t.Fatal(err)
		}
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("page %d: panic escaped: %v", p, r)
				}
			}()
			return openAndRead()
		}()
		switch {
		case err == nil:
		case errors.Is(err, want):
			refused++
			if strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), path) {
				t.Fatalf("page %d: error %q is not one line naming the file", p, err)
			}
		default:
			t.Fatalf("page %d: err = %v, want %v", p, err, want)
		}
	}
	if refused == 0 {
		t.Fatal("no damaged page was refused")
	}
	return refused
}
