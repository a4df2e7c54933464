package agent

import (
	"bytes"
	"sync"
	"testing"

	"github.com/meshlet/meshlet/client/checks"
)

// A script check's stdout and stderr are written from two goroutines into
// one buffer (run with -race) and kept to checks.MaxOutput.
func TestCappedBufferConcurrentAndBounded(t *testing.T) {
	b := &cappedBuffer{max: checks.MaxOutput}
	chunk := bytes.Repeat([]byte("x"), 100)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range checks.MaxOutput / 50 {
				if n, err := b.Write(chunk); n != len(chunk) || err != nil {
					t.Errorf("Write = %d, %v; want everything taken", n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := len(b.Bytes()); n != checks.MaxOutput {
		t.Fatalf("kept %d bytes, want %d", n, checks.MaxOutput)
	}
	small := &cappedBuffer{max: 10}
	_, _ = small.Write([]byte("hello "))
	_, _ = small.Write([]byte("world!"))
	if got := string(small.Bytes()); got != "hello worl" {
		t.Fatalf("kept %q, want the first 10 bytes", got)
	}
}
