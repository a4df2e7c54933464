package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrMemberNotFound is returned by RemoveMember for a name no member has.
var ErrMemberNotFound = errors.New("etcd member not found")

// MemberInfo describes a cluster member. A member added but not started
// yet has no Name and no ClientURLs.
type MemberInfo struct {
	ID                   uint64
	Name                 string
	PeerURLs, ClientURLs []string
	IsLeader, IsLearner  bool
}

// Members lists the cluster's members (a linearizable read) and marks the
// leader, as reported by the first of the client's endpoints that answers
// a status request.
func Members(ctx context.Context, c *clientv3.Client) ([]MemberInfo, error) {
	resp, err := c.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to list etcd members: %w", err)
	}
	leader, err := leaderID(ctx, c)
	if err != nil {
		return nil, err
	}
	out := make([]MemberInfo, 0, len(resp.Members))
	for _, m := range resp.Members {
		out = append(out, MemberInfo{
			ID:         m.ID,
			Name:       m.Name,
			PeerURLs:   slices.Clone(m.PeerURLs),
			ClientURLs: slices.Clone(m.ClientURLs),
			IsLeader:   m.ID == leader,
			IsLearner:  m.IsLearner,
		})
	}
	return out, nil
}

// leaderID asks the client's endpoints in turn for the leader's ID. An
// in-process client (Member.Client) has no endpoints and answers for its
// member.
func leaderID(ctx context.Context, c *clientv3.Client) (uint64, error) {
	eps := c.Endpoints()
	if len(eps) == 0 {
		eps = []string{""}
	}
	var tried []string
	var lastErr error
	for _, ep := range eps {
		st, err := c.Status(ctx, ep)
		if err == nil && st.Leader != 0 {
			return st.Leader, nil
		}
		if err == nil {
			err = errors.New("no leader")
		}
		tried, lastErr = append(tried, ep), err
		if ctx.Err() != nil {
			break
		}
	}
	return 0, fmt.Errorf("failed to find the etcd leader (asked %s): %w", strings.Join(tried, ","), lastErr)
}

// refusedRetry is how often a membership change etcd refused for now is
// tried again.
const refusedRetry = 250 * time.Millisecond

// retryRefused runs change until etcd stops refusing it with one of the
// retryable errors or ctx ends. For example, etcd refuses to add a member
// unless the member that handles the request has been connected to a
// quorum for 5 s (its HealthInterval), so a member that joined a moment ago
// delays the next join by a few seconds.
func retryRefused(ctx context.Context, change func() error, retryable ...error) error {
	for {
		err := change()
		if err == nil || !slices.ContainsFunc(retryable, func(r error) bool { return errors.Is(err, r) }) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(refusedRetry):
		}
	}
}

// AddMember adds a member with peerURL to the cluster c talks to, as a
// learner, and returns the InitialCluster the new member must start with
// (ClusterState "existing"); Start then promotes it to a voting member once
// it caught up. A learner does not count for the quorum, so the cluster
// keeps writing while the new member starts (or if it never does). A
// change etcd refuses for now (the cluster changed a moment ago, another
// learner is being promoted) is retried until ctx ends. Calling AddMember
// again for the same name and peer URL returns the same answer.
func AddMember(ctx context.Context, c *clientv3.Client, name, peerURL string) (string, error) {
	if name == "" || peerURL == "" {
		return "", fmt.Errorf("%w: member name and peer URL are required", ErrInvalidConfig)
	}
	// A serializable list answers without a quorum: a retry must find a
	// member it added even while the cluster is unavailable.
	list, err := c.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return "", fmt.Errorf("failed to list etcd members: %w", err)
	}
	members := list.Members
	newID, found := uint64(0), false
	for _, m := range members {
		switch {
		case m.Name == name && !slices.Contains(m.PeerURLs, peerURL):
			return "", fmt.Errorf("failed to add etcd member %q: a member of that name has peer URLs %s", name, strings.Join(m.PeerURLs, ","))
		case slices.Contains(m.PeerURLs, peerURL) && m.Name != "" && m.Name != name:
			return "", fmt.Errorf("failed to add etcd member %q: peer URL %s belongs to member %q", name, peerURL, m.Name)
		case slices.Contains(m.PeerURLs, peerURL):
			newID, found = m.ID, true // added before (and maybe started): reuse it
		}
	}
	if !found {
		var resp *clientv3.MemberAddResponse
		err := retryRefused(ctx, func() (err error) {
			resp, err = c.MemberAddAsLearner(ctx, []string{peerURL})
			return err
		}, rpctypes.ErrUnhealthy, rpctypes.ErrTooManyLearners)
		if err != nil {
			return "", fmt.Errorf("failed to add etcd member %q at %s: %w", name, peerURL, err)
		}
		members, newID = resp.Members, resp.Member.ID
	}
	return initialCluster(members, newID, name)
}

// initialCluster renders "name=peerURL,..." for all members, naming the
// member newID name. Another member added but not started has no name yet,
// and the new member could not start with it.
func initialCluster(members []*etcdserverpb.Member, newID uint64, name string) (string, error) {
	var parts []string
	for _, m := range members {
		n := m.Name
		if m.ID == newID {
			n = name
		}
		if n == "" {
			return "", fmt.Errorf("failed to add etcd member %q: member with peer URLs %s was added but has not started; start or remove it first", name, strings.Join(m.PeerURLs, ","))
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	return strings.Join(parts, ","), nil
}

// promote makes the learner id a voting member once it caught up with the
// leader (a member can promote itself: its request is forwarded to the
// leader).
func promote(ctx context.Context, c *clientv3.Client, id uint64) error {
	err := retryRefused(ctx, func() error {
		_, err := c.MemberPromote(ctx, id)
		if errors.Is(err, rpctypes.ErrMemberNotLearner) && isVoter(ctx, c, id) {
			// An earlier attempt was applied but its answer was lost (a
			// timeout under load): the retry is refused ("can only
			// promote a learner member"), the promotion is done.
			return nil
		}
		return err
	}, rpctypes.ErrMemberLearnerNotReady, rpctypes.ErrMemberNotEnoughStarted, rpctypes.ErrUnhealthy, rpctypes.ErrTimeout)
	if err != nil {
		return fmt.Errorf("failed to promote etcd learner %x to a voting member: %w", id, err)
	}
	return nil
}

// isVoter reports whether member id is listed as a voting member.
func isVoter(ctx context.Context, c *clientv3.Client, id uint64) bool {
	list, err := c.MemberList(ctx)
	if err != nil {
		return false
	}
	for _, m := range list.Members {
		if m.ID == id {
			return !m.IsLearner
		}
	}
	return false
}

// RemoveMember removes the member called name from the cluster c talks to.
func RemoveMember(ctx context.Context, c *clientv3.Client, name string) error {
	list, err := c.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("failed to list etcd members: %w", err)
	}
	for _, m := range list.Members {
		if m.Name != name {
			continue
		}
		err := retryRefused(ctx, func() error {
			_, err := c.MemberRemove(ctx, m.ID)
			return err
		}, rpctypes.ErrUnhealthy)
		if err != nil {
			return fmt.Errorf("failed to remove etcd member %q: %w", name, err)
		}
		return nil
	}
	return fmt.Errorf("%w: %q", ErrMemberNotFound, name)
}
