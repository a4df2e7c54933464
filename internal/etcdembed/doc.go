// Package etcdembed runs an etcd member inside the meshlet process (the
// default for -dev and a lone server) and connects clients to embedded or
// external etcd clusters.
//
// It owns the pieces of etcd v3.7 that are easy to get wrong:
//
//   - Start configures a member entirely in code: explicit URLs (etcd's
//     defaults bind localhost:2379/2380 as member "default"), the JSON gRPC
//     gateway off (it accepts unauthenticated plain-HTTP writes), pprof off,
//     periodic auto compaction on, raised request and transaction limits,
//     and zap logs adapted to hclog at warn and above.
//   - A member takes a flock on its data dir before etcd opens it: a second
//     etcd on a held dir would bind its ports and then block forever in
//     bbolt. The second Start fails at once with ErrLocked.
//   - Member.Close closes the member's in-process client before the member
//     (open watch or lease streams otherwise hold Close for seconds), runs
//     once (etcd's own Close panics the second time), stops a member that
//     never became ready before closing it (etcd's Close alone blocks
//     forever then), and releases the lock last.
//   - A data dir that already holds a member restarts that member; the
//     initial-cluster settings are then ignored by etcd.
//   - Joining a running cluster is AddMember through any client of that
//     cluster, then Start with the returned InitialCluster and ClusterState
//     "existing" (as k3s joins its embedded-etcd servers). AddMember adds a
//     learner, which does not count for the quorum: a lone server keeps
//     writing while the second one starts (adding a voter would stop it
//     until then, and the joiner's bootstrap waits 5 s on that). Start
//     promotes its member once it caught up. etcd refuses the next join for
//     5 s after one (a member must have been connected to a quorum that
//     long); AddMember retries until its ctx ends.
//   - Logs: a normal start and Close log nothing at warn or above; the few
//     warnings etcd logs every time about choices made here (one port for
//     gRPC and HTTP, a request limit above 10 MiB, its unused simple auth
//     tokens) and the closed-listener errors of a Close are debug.
//
// WAL segments: etcd preallocates every WAL segment to wal.SegmentSizeBytes
// (64 MB) and keeps the next one preallocated, so an empty member costs
// 128 MB of disk. Start lowers that package variable once, before the first
// member of the process opens its WAL, to WALSegmentBytes (8 MiB). It is
// safe: the size only decides preallocation and when a segment is cut; a
// record larger than a segment still fits (the segment grows; the decoder
// bounds records by the file's size, not the segment size), and existing
// 64 MB segments of an older data dir are read as before. The cost is a cut
// (a new file and an fsync) every 8 MiB of log instead of every 64 MB,
// negligible for meshlet's write rate. The variable is process-global and
// read without a lock by etcd, so it is written only once, under a
// sync.Once, before any member starts; nothing else may write it.
//
// Concurrency: a Member's methods are safe for concurrent use. Clients from
// Connect belong to their caller, who closes them before closing a Member
// they talk to.
package etcdembed
