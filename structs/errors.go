package structs

import "errors"

// ErrUnknownNode is a server's answer to a call for a node it does not know
// (never registered, or lost): the client registers the node again. The
// RPC layer carries it across the network.
var ErrUnknownNode = errors.New("node is not registered")
