package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/authz"
	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/intention"
)

// intentionChanges is how many allow/deny flips are timed.
const intentionChanges = 200

// errNotEnforced is returned when a changed intention is not enforced
// within the hang guard.
var errNotEnforced = errors.New("intention change not enforced")

// intentionFigures times an intention change until the authorization
// service decides by it, with the intentions persisted as the agent keeps
// them (measured) and in memory (baseline).
func (r *Runner) intentionFigures(ctx context.Context) []*Figure {
	persisted, err := measureIntentionChange(ctx, filepath.Join(r.scratch, "intentions"), intentionChanges)
	mem, errMem := measureIntentionChange(ctx, "", intentionChanges)
	if err != nil {
		return []*Figure{NotMeasured("intention change enforced, p99", "ms", err.Error(), nil)}
	}
	var base50, base99 *float64
	if errMem == nil {
		base50, base99 = ptr(ms(percentile(mem, 50))), ptr(ms(percentile(mem, 99)))
	}
	note := "meshlet enforces intentions per connection through ext_authz (no xDS push, so no proxy has to ACK): " +
		"a change is in force for the next connection once the store has it. Baseline: the same store kept in memory (no disk write)."
	f50 := Measured("intention change enforced, p50", "ms", ms(percentile(persisted, 50)), base50, nil)
	f50.Note = note
	return []*Figure{f50, Measured("intention change enforced, p99", "ms", ms(percentile(persisted, 99)), base99, nil)}
}

// measureIntentionChange flips web→db between deny and allow n times,
// timing each from the write until Authorize returns the new decision.
func measureIntentionChange(ctx context.Context, dir string, n int) ([]time.Duration, error) {
	log := hclog.NewNullLogger()
	m, err := ca.New(ca.Config{}, log, nil)
	if err != nil {
		return nil, fmt.Errorf("failed to create CA: %w", err)
	}
	defer m.Close()
	ix, err := intention.New(dir, true, log)
	if err != nil {
		return nil, fmt.Errorf("failed to open intentions: %w", err)
	}
	// A busy mesh's worth of other intentions.
	for i := 0; i < 500; i++ {
		in := intention.Intention{SourceName: fmt.Sprintf("svc-%d", i), DestinationName: fmt.Sprintf("svc-%d", i+1), Action: intention.ActionAllow}
		if _, err := ix.Upsert(in, true); err != nil {
			return nil, fmt.Errorf("failed to seed intentions: %w", err)
		}
	}
	svc := authz.New(m, ix, log, nil)
	src := m.SpiffeID("web")
	out := make([]time.Duration, 0, n)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		action, allow := intention.ActionDeny, false
		if i%2 == 1 {
			action, allow = intention.ActionAllow, true
		}
		start := time.Now()
		if _, err := ix.Upsert(intention.Intention{SourceName: "web", DestinationName: "db", Action: action}, true); err != nil {
			return nil, fmt.Errorf("failed to change intention: %w", err)
		}
		for {
			d, err := svc.Authorize(src, "db")
			if err != nil {
				return nil, fmt.Errorf("failed to authorize: %w", err)
			}
			if d.Allowed == allow {
				break
			}
			if time.Since(start) > 5*time.Second {
				return nil, fmt.Errorf("%w after 5s", errNotEnforced)
			}
			time.Sleep(50 * time.Microsecond)
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// percentile returns the p-th percentile (nearest rank) of ds; ds is
// sorted in place.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(p/100*float64(len(ds))+0.5) - 1
	return ds[max(0, min(i, len(ds)-1))]
}
