package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshlet/meshlet/state"
)

// ErrNotLeader is returned for a write made on a server that is not the
// cluster's leader (it has not won the election, or lost it).
var ErrNotLeader = errors.New("this server is not the leader")

// Leadership decides which server schedules. Run campaigns until ctx ends:
// each time this server becomes the leader it calls won with a context
// that ends when leadership is lost, and the election key and the
// revision that created it (writes are guarded by them, so a deposed
// leader cannot commit); lost runs when leadership ends.
type Leadership interface {
	Run(ctx context.Context, won func(ctx context.Context, key string, rev int64), lost func())
	// Leader returns the current leader's RPC address ("" while there is
	// none).
	Leader(ctx context.Context) (string, error)
}

// guardedStore is a Store whose writes can be made conditional on the
// leader's election key (state.EtcdStore).
type guardedStore interface {
	SetLeader(key string, createRevision int64)
	ClearLeader()
}

// IsLeader reports whether this server currently schedules. A server
// without a Leadership (one process, one store) is always the leader.
func (s *Server) IsLeader() bool { return s.leader.Load() }

// requireLeader fails a write early on a follower; the store's guard
// catches a leader deposed after this check.
func (s *Server) requireLeader() error {
	if !s.IsLeader() {
		return ErrNotLeader
	}
	return nil
}

// startLeadership runs the election in the background (see Leadership).
func (s *Server) startLeadership(l Leadership) {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopElection = cancel
	s.electionDone = make(chan struct{})
	go func() {
		defer close(s.electionDone)
		l.Run(ctx, s.becomeLeader, s.loseLeadership)
	}()
}

// becomeLeader guards the store's writes with the election key, then does
// what a new leader owes the cluster: evaluate what the previous leader
// left unplanned and re-arm pending reschedules.
func (s *Server) becomeLeader(ctx context.Context, key string, rev int64) {
	if g, ok := s.store.(guardedStore); ok {
		g.SetLeader(key, rev)
	}
	s.mu.Lock()
	s.shutdown = false
	s.mu.Unlock()
	s.leader.Store(true)
	s.logger.Info("became leader", "election_key", key, "revision", rev)
	for attempt := 1; ctx.Err() == nil; attempt++ {
		err := s.leaderDuties()
		if err == nil {
			return
		}
		s.logger.Error("new leader failed to evaluate pending work; retrying", "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(min(time.Duration(attempt)*time.Second, 10*time.Second)):
		}
	}
}

// loseLeadership stops the leader's timers; writes fail with ErrNotLeader
// until this server wins again.
func (s *Server) loseLeadership() {
	s.leader.Store(false)
	if g, ok := s.store.(guardedStore); ok {
		g.ClearLeader()
	}
	s.stopTimers()
	s.logger.Warn("lost leadership")
}

// stopTimers stops the follow-up timers and arms no more until this
// server becomes the leader (again).
func (s *Server) stopTimers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdown = true
	clear(s.blocked) // a new leader finds them in the evaluations
	for _, m := range []map[string]*time.Timer{s.timers, s.heartbeats} {
		for id, t := range m {
			t.Stop()
			delete(m, id)
		}
	}
}

// leaderDuties is what a new leader owes the cluster: evaluate what the
// previous one left unplanned, re-arm pending reschedules and give every
// live node a heartbeat deadline.
func (s *Server) leaderDuties() error {
	if err := s.recoverState(); err != nil {
		return err
	}
	if err := s.armDrainChecks(); err != nil {
		return err
	}
	return s.armAllHeartbeats()
}

// notLeader maps the store's guard failure to ErrNotLeader.
func notLeader(err error) error {
	if errors.Is(err, state.ErrNotLeader) && !errors.Is(err, ErrNotLeader) {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return err
}

// Reload takes up the work pending in the state, as a new leader does,
// after the state was replaced under the server (a snapshot restore).
func (s *Server) Reload() error {
	if err := s.requireLeader(); err != nil {
		return err
	}
	s.stopTimers()
	s.mu.Lock()
	s.shutdown = false
	s.mu.Unlock()
	return s.leaderDuties()
}
