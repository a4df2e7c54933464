package bench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"
)

// The CNI figures depend on the size of the host's conntrack table: the
// portmap plugin clears stale UDP entries of a mapped port by dumping the
// whole table, once per ADD and twice per DEL. Closed TCP connections stay
// in it for two minutes (TIME_WAIT), so a load run just before (an earlier
// benchmark, another area) slows setup and teardown by tens of ms.
const (
	conntrackCountPath = "/proc/sys/net/netfilter/nf_conntrack_count"
	conntrackQuiet     = 2000
	conntrackMaxWait   = 150 * time.Second
)

// conntrackCount is the number of entries in the conntrack table; ok is
// false when conntrack is not loaded.
func conntrackCount() (n int, ok bool) {
	b, err := os.ReadFile(conntrackCountPath)
	if err != nil {
		return 0, false
	}
	n, err = strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}

// waitConntrackQuiet waits, up to conntrackMaxWait, for the conntrack table
// to hold at most conntrackQuiet entries, and returns the count it saw
// last (-1 without conntrack). Waiting is all it does: the table is the
// host's, not the benchmark's to flush.
func (r *Runner) waitConntrackQuiet(ctx context.Context) int {
	n, ok := conntrackCount()
	if !ok {
		return -1
	}
	if n > conntrackQuiet {
		r.log.Info("waiting for the conntrack table to drain before the CNI benchmark", "entries", n, "max_wait", conntrackMaxWait)
	}
	deadline := time.Now().Add(conntrackMaxWait)
	for n > conntrackQuiet && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return n
		case <-time.After(2 * time.Second):
		}
		n, _ = conntrackCount()
	}
	return n
}
