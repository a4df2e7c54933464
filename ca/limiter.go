package ca

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Limiter paces leaf signings so that a fleet-wide re-issue (after a root
// rotation) does not stampede. Wait blocks until one signing may proceed or
// ctx ends.
type Limiter interface {
	Wait(ctx context.Context) error
}

// TokenBucket is a Limiter allowing rate signings per second on average
// with bursts of up to burst.
type TokenBucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
	now    func() time.Time
}

// NewTokenBucket returns a full bucket. rate must be > 0; burst < 1 means 1.
func NewTokenBucket(rate float64, burst int) *TokenBucket {
	b := float64(burst)
	if b < 1 {
		b = 1
	}
	return &TokenBucket{rate: rate, burst: b, tokens: b, now: time.Now}
}

// reserve takes one token at time now and returns how long the caller
// must wait before using it (zero when a token was available).
func (t *TokenBucket) reserve(now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.last.IsZero() && now.After(t.last) {
		t.tokens += now.Sub(t.last).Seconds() * t.rate
		if t.tokens > t.burst {
			t.tokens = t.burst
		}
	}
	if t.last.IsZero() || now.After(t.last) {
		t.last = now
	}
	t.tokens--
	if t.tokens >= 0 {
		return 0
	}
	return time.Duration(-t.tokens / t.rate * float64(time.Second))
}

// cancelReservation gives back a token taken by reserve.
func (t *TokenBucket) cancelReservation() {
	t.mu.Lock()
	t.tokens++
	t.mu.Unlock()
}

// Wait implements Limiter.
func (t *TokenBucket) Wait(ctx context.Context) error {
	d := t.reserve(t.now())
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		t.cancelReservation()
		return fmt.Errorf("failed to wait for the signing rate limiter: %w", ctx.Err())
	}
}
