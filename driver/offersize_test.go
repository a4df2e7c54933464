package driver

import "testing"

func TestOfferSizeKeepsTheLatest(t *testing.T) {
	ch := make(chan TerminalSize, 1)
	OfferSize(ch, TerminalSize{Height: 24, Width: 80})
	OfferSize(ch, TerminalSize{Height: 40, Width: 120}) // must not block
	if got := <-ch; got != (TerminalSize{Height: 40, Width: 120}) {
		t.Fatalf("read %+v, want the newer size 40x120", got)
	}
	select {
	case sz := <-ch:
		t.Fatalf("a second size %+v is queued; only the latest should be", sz)
	default:
	}
}
