package rpc

import (
	"crypto/sha256"
	"crypto/subtle"

	"github.com/meshlet/meshlet/structs"
)

// The node secret is stored on the node (structs.Node.SecretID, as Nomad's
// Node.SecretID); these are the only places that touch the field.

func nodeSecret(n *structs.Node) string { return n.SecretID }

func setNodeSecret(n *structs.Node, secret string) { n.SecretID = secret }

// secretEqual compares two secrets in constant time (hashed first, so not
// even their lengths leak); an empty stored secret matches nothing.
func secretEqual(stored, presented string) bool {
	if stored == "" || presented == "" {
		return false
	}
	a, b := sha256.Sum256([]byte(stored)), sha256.Sum256([]byte(presented))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
