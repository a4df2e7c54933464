// Package cni owns meshlet's per-allocation network namespaces: it creates a
// network namespace per allocation (bind-mounted at <NetNSDir>/<alloc-id>),
// attaches it to a CNI network with libcni and the standard plugins
// (loopback, bridge + host-local, firewall, portmap), and undoes all of it on
// teardown, on a failed setup and in garbage collection.
//
// Modes (the group's network.mode):
//
//   - "host": nothing to do; Setup returns nil, nil.
//   - "none": nothing to do either; Setup returns nil, nil and the tasks share
//     the host's network namespace. meshlet does not (yet) isolate "none"
//     allocations in an empty namespace.
//   - "bridge": the built-in conflist generated from Config (see
//     BuildConfList), the interface inside is eth0. The plugins use their
//     iptables backends: firewall (chain CNI-FORWARD, admin chain
//     Config.AdminChain) and portmap (host ports, reachable on 127.0.0.1
//     too) per allocation. Masquerading is meshlet's own, once per network:
//     rules in the nat chain MESHLET-POSTROUTING, ensured before the
//     Manager's first ADD and kept when the agent stops (see masquerade.go
//     and RemoveBridgeNAT; rules are keyed by bridge name).
//   - "cni/<name>": the conflist <ConfigDir>/<name>.conflist, or the conflist
//     in ConfigDir whose "name" is <name>.
//
// The CNI container ID is the allocation ID. CNI_ARGS carry
// IgnoreUnknown=true and Nomad's keys (NOMAD_REGION, NOMAD_NAMESPACE,
// NOMAD_JOB_ID, NOMAD_GROUP_NAME, NOMAD_ALLOC_ID), so third-party plugins
// written for Nomad work unchanged.
//
// Teardown runs CNI DEL with the config cached at ADD; only when DEL fails
// or nothing was cached does it sweep iptables for the rules and chains
// tagged with the allocation ID and the CNI-FORWARD rules of its
// addresses. GC does the same for every dead allocation of this network.
//
// State on disk, all under Config.StateDir: "ipam/<network>/" (host-local
// leases of the built-in network), "cache/" (libcni's cached results and
// configs, used for DEL and CHECK after an agent restart) and "netns/<id>"
// (a record for each namespace this package created: the marker GC trusts).
//
// Concurrency: a Manager is safe for concurrent use, and several Managers
// may live in one process. Setup, Restore and Teardown of one allocation
// are serialized by a lock keyed by its namespace path (waiting gives up
// when the caller's context ends); different allocations run in parallel,
// since the plugins lock what they share themselves (host-local its lease
// dir with a file lock, iptables the xtables lock via --wait), up to a
// bound of a few per CPU (more only compete for CPU; a hung plugin holds
// one of them until its context ends). The first ADD of each network by a Manager runs alone so the plugins create
// their shared chains and the bridge without racing. meshlet's own
// host-global work (the shared netns mount, its nat rules, iptables sweeps)
// holds a narrow package lock for its duration only. GC takes each dead
// allocation's lock in turn. See locks.go for the locks and their order.
// Private methods whose names end in "Locked" assume the allocation's lock
// is held. New, NetNSPath and ModeOf take no lock.
package cni
