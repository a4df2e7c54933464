package etcdembed

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestThreeMembers grows a cluster to three members the way a joining
// server does (AddMember, then Start with ClusterState "existing"), over
// mutual TLS between peers, then loses its leader.
func TestThreeMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-member cluster")
	}
	pki := newTestPKI(t)
	cfgs := make([]Config, 3)
	for i, name := range []string{"m1", "m2", "m3"} {
		cfgs[i] = memberConfig(t, name)
		cfgs[i].PeerURL = strings.Replace(cfgs[i].PeerURL, "http:", "https:", 1)
		cfgs[i].PeerTLS = pki.server()
	}
	ctx := ctxT(t, 30*time.Second)
	members := []*Member{start(t, cfgs[0])}
	for i := 1; i < 3; i++ {
		ic, err := AddMember(ctx, members[0].Client(), cfgs[i].Name, cfgs[i].PeerURL)
		if err != nil {
			t.Fatalf("AddMember(%s): %v", cfgs[i].Name, err)
		}
		again, err := AddMember(ctx, members[0].Client(), cfgs[i].Name, cfgs[i].PeerURL)
		if err != nil || again != ic {
			t.Fatalf("AddMember(%s) again = %q, %v; want %q", cfgs[i].Name, again, err, ic)
		}
		cfgs[i].InitialCluster, cfgs[i].ClusterState = ic, ClusterStateExisting
		members = append(members, start(t, cfgs[i]))
	}

	infos := checkMembers(t, ctx, members[2].Client(), 3)
	var leader *Member
	for _, m := range members {
		if m.IsLeader() {
			leader = m
		}
	}
	if leader == nil || !infoOf(infos, leader.Name()).IsLeader {
		t.Fatalf("members disagree on the leader: %+v", infos)
	}

	if err := leader.Close(); err != nil {
		t.Fatalf("Close(leader %s): %v", leader.Name(), err)
	}
	var rest []*Member
	for _, m := range members {
		if m != leader {
			rest = append(rest, m)
		}
	}
	begin := time.Now()
	putEventually(t, rest[0].Client(), 10*time.Second)
	t.Logf("writes resumed %s after the leader closed", time.Since(begin).Round(time.Millisecond))

	if err := RemoveMember(ctx, rest[0].Client(), leader.Name()); err != nil {
		t.Fatalf("RemoveMember(%s): %v", leader.Name(), err)
	}
	checkMembers(t, ctx, rest[1].Client(), 2)
	if err := RemoveMember(ctx, rest[0].Client(), leader.Name()); !errors.Is(err, ErrMemberNotFound) {
		t.Fatalf("RemoveMember(%s) again: err = %v, want ErrMemberNotFound", leader.Name(), err)
	}
}

// checkMembers checks there are n started voting members with exactly
// one leader.
func checkMembers(t *testing.T, ctx context.Context, c *clientv3.Client, n int) []MemberInfo {
	t.Helper()
	infos, err := Members(ctx, c)
	if err != nil {
		t.Fatalf("Members: %v", err)
	}
	leaders := 0
	for _, i := range infos {
		if i.IsLeader {
			leaders++
		}
		if i.Name == "" || i.IsLearner || len(i.ClientURLs) != 1 {
			t.Errorf("member %+v is not a started voting member", i)
		}
	}
	if len(infos) != n || leaders != 1 {
		t.Fatalf("Members = %+v, want %d with one leader", infos, n)
	}
	return infos
}

func infoOf(infos []MemberInfo, name string) MemberInfo {
	for _, i := range infos {
		if i.Name == name {
			return i
		}
	}
	return MemberInfo{}
}

// putEventually retries a write until it succeeds or within fails.
func putEventually(t *testing.T, c *clientv3.Client, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Put(ctx, "/meshlet/after-failover", "ok")
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write within %s of the leader closing: %v", within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
