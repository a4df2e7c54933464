// Package structs holds meshlet's core data model: jobs as declared in a
// jobspec, the allocations the scheduler places, and the state a client
// reports back. Field and JSON names follow Nomad's /v1 API
// (github.com/hashicorp/nomad/api) so that the official client can talk to
// meshlet unchanged. Types here are plain data: no locking, no I/O. Copy
// before mutating anything shared between goroutines.
package structs
