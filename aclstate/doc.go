// Package aclstate keeps the servers' ACL state (package acl's tokens and
// policies) in etcd: EtcdStore implements acl.Store.
//
// Keys under one prefix (default /meshlet/acl/):
//
//	bootstrap               written once, by the one successful Bootstrap
//	policies/<name>         one policy (Name, Description, Rules)
//	tokens/<accessor-id>    one token; never its secret, only SecretHash
//	secrets/<secret-hash>   the accessor ID of the token with that secret
//	index                   moved by every ACL write (its guard)
//
// An object's CreateIndex and ModifyIndex are its key's etcd create and
// modify revisions; the ACL index (Index, the list calls, Watch) is the
// index key's modify revision. Every write reads the keys it depends on
// together with the index key at one revision, checks the new state and
// commits only if the index key did not move since, moving it in the same
// transaction: a write is checked against exactly the state it lands in
// (a client token against the policies that exist; a token and its
// secrets/ key are written and deleted together). A write that lost such
// a race runs again, a bounded number of times (ErrConflict).
//
// A stored value that does not decode, or that names another object than
// its key, is an error wrapping ErrCorrupt; reads and writes fail rather
// than skip it.
//
// Concurrency: an EtcdStore is safe for concurrent use, and several
// stores (of one server or of several) may share a prefix.
package aclstate
