package meshtest

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/meshlet/meshlet/internal/testutil"
)

// maxStreamMessages bounds a streamer's loop; it is normally stopped long
// before.
const maxStreamMessages = 200000

// streamPayload makes each streamed line about 1 KiB.
var streamPayload = strings.Repeat("x", 1000)

// streamer keeps one long-lived connection busy: it sends numbered lines
// and checks every echo, on its own goroutine, until stopped or broken.
type streamer struct {
	c    *lineConn
	sent atomic.Int64
	quit chan struct{}
	done chan struct{}
	err  error // set before done is closed
}

func startStreamer(t testing.TB, c *lineConn) *streamer {
	s := &streamer{c: c, quit: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *streamer) run() {
	defer close(s.done)
	for i := 0; i < maxStreamMessages; i++ {
		select {
		case <-s.quit:
			return
		default:
		}
		if err := s.c.roundTrip(fmt.Sprintf("%d-%s", i, streamPayload)); err != nil {
			s.err = fmt.Errorf("long-lived connection broke after %d messages: %w", i, err)
			return
		}
		s.sent.Add(1)
	}
}

// progress waits until n more messages went through (or the stream broke,
// which fails the test).
func (s *streamer) progress(t testing.TB, n int64, during string) {
	t.Helper()
	target := s.sent.Load() + n
	testutil.WaitFor(t, waitTimeout, fmt.Sprintf("%d more streamed messages %s", n, during), func() bool {
		select {
		case <-s.done:
			return true
		default:
			return s.sent.Load() >= target
		}
	})
	select {
	case <-s.done:
		if s.err != nil {
			t.Fatalf("%s: %v", during, s.err)
		}
		t.Fatalf("%s: the stream ended after %d messages", during, s.sent.Load())
	default:
	}
}

// stop ends the stream and returns its error, if it broke. Idempotent.
func (s *streamer) stop() error {
	select {
	case <-s.quit:
	default:
		close(s.quit)
	}
	<-s.done
	return s.err
}
