// Package sealedjson is the on-disk shape of meshlet's small JSON state
// files (intentions, CA state): the state inside an envelope that carries
// its SHA-256, so that a torn, truncated or edited file is detected at
// load instead of being taken for valid (possibly empty) state.
//
//	{"Version": 2, "SHA256": "<hex of the compact State>", "State": {...}}
//
// Version 1 files (the bare state, a top-level "Version": 1) are still
// read, without a checksum, and callers rewrite them as version 2.
package sealedjson

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// Version is the envelope version Marshal writes.
const Version = 2

// ErrChecksum: the state does not match the envelope's SHA-256.
var ErrChecksum = errors.New("checksum mismatch")

type envelope struct {
	Version int
	SHA256  string          `json:",omitempty"`
	State   json.RawMessage `json:",omitempty"`
}

// Marshal encodes v and seals it in a version 2 envelope (indented).
func Marshal(v any) ([]byte, error) {
	state, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(state)
	return json.MarshalIndent(envelope{Version: Version, SHA256: hex.EncodeToString(sum[:]), State: state}, "", "  ")
}

// Unmarshal checks b's envelope and decodes its state into v. A version 1
// file is decoded whole into v.
func Unmarshal(b []byte, v any) error {
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return err
	}
	switch env.Version {
	case 1:
		return json.Unmarshal(b, v)
	case Version:
		var compact bytes.Buffer
		if err := json.Compact(&compact, env.State); err != nil {
			return err
		}
		if sum := sha256.Sum256(compact.Bytes()); hex.EncodeToString(sum[:]) != env.SHA256 {
			return ErrChecksum
		}
		return json.Unmarshal(env.State, v)
	default:
		return fmt.Errorf("unsupported version %d", env.Version)
	}
}
