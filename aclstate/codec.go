package aclstate

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/internal/lazyre"
)

// Limits of ACL objects, as Nomad's.
const (
	maxNameLen        = 256 // token name, policy description
	maxTokenPolicies  = 128
	secretHashHexLen  = 64 // acl.HashSecret: hex SHA-256
	maxAccessorIDLen  = 128
	maxPolicyNameLen  = 128
	maxRulesBytes     = 64 << 10
	maxDescriptionLen = 256
)

var (
	// policyNameRe is Nomad's rule for policy names; it keeps them safe
	// as one key segment.
	policyNameRe = lazyre.New(`^[a-zA-Z0-9-]{1,128}$`)
	// accessorRe admits UUIDs and other plain IDs, one key segment each.
	accessorRe = lazyre.New(`^[a-zA-Z0-9_.-]{1,128}$`)
	// serviceIdentityRe is Consul's rule for service identity names.
	serviceIdentityRe = lazyre.New(`^[a-z0-9](?:[a-z0-9_-]{0,254}[a-z0-9])?$`)
	// secretHashRe is the form of acl.HashSecret's output.
	secretHashRe = lazyre.New(`^[0-9a-f]{64}$`)
)

// checkPolicyName refuses a name that is not Nomad's policy name form.
func checkPolicyName(name string) error {
	if !policyNameRe.MatchString(name) {
		return fmt.Errorf("%w: policy name %.140q must be 1 to %d letters, digits or '-'", acl.ErrInvalid, name, maxPolicyNameLen)
	}
	return nil
}

// checkAccessorID refuses an accessor ID that cannot be one key segment.
func checkAccessorID(id string) error {
	if !accessorRe.MatchString(id) || id == "." || id == ".." {
		return fmt.Errorf("%w: accessor ID %.140q must be 1 to %d letters, digits, '_', '.' or '-'", acl.ErrInvalid, id, maxAccessorIDLen)
	}
	return nil
}

// validSecretHash reports whether h has acl.HashSecret's form.
func validSecretHash(h string) bool { return secretHashRe.MatchString(h) }

// storedPolicy is the stored value of a policy (the indexes are the key's
// revisions).
type storedPolicy struct {
	Name        string
	Description string `json:",omitempty"`
	Rules       string
}

// storedToken is the stored value of a token: never its secret.
type storedToken struct {
	AccessorID     string
	SecretHash     string
	Name           string `json:",omitempty"`
	Type           string
	Policies       []string `json:",omitempty"`
	Global         bool     `json:",omitempty"`
	CreateTime     time.Time
	ExpirationTime *time.Time `json:",omitempty"`
	// Service identities and the workload binding (acl.Token).
	ServiceIdentities []*acl.ServiceIdentity `json:",omitempty"`
	AllocID           string                 `json:",omitempty"`
	TaskName          string                 `json:",omitempty"`
}

// bootstrapRecord is the value of the bootstrap key.
type bootstrapRecord struct {
	AccessorID string
	Time       time.Time
}

func encodePolicy(p *acl.Policy) string {
	b, _ := json.Marshal(storedPolicy{Name: p.Name, Description: p.Description, Rules: p.Rules}) // strings only: cannot fail
	return string(b)
}

func encodeToken(t *acl.Token) string {
	b, _ := json.Marshal(storedToken{AccessorID: t.AccessorID, SecretHash: t.SecretHash, Name: t.Name, Type: t.Type,
		Policies: t.Policies, Global: t.Global, CreateTime: t.CreateTime, ExpirationTime: t.ExpirationTime,
		ServiceIdentities: t.ServiceIdentities, AllocID: t.AllocID, TaskName: t.TaskName}) // cannot fail
	return string(b)
}

// decodeStrict decodes one JSON object into v.
func decodeStrict(kv *mvccpb.KeyValue, v any) error {
	if len(kv.Value) == 0 || kv.Value[0] != '{' {
		return fmt.Errorf("%w: etcd key %s: not a JSON object", ErrCorrupt, kv.Key)
	}
	if err := json.Unmarshal(kv.Value, v); err != nil {
		return fmt.Errorf("%w: etcd key %s: %w", ErrCorrupt, kv.Key, err)
	}
	return nil
}

// decodePolicy decodes the policy stored under policies/<name>.
func decodePolicy(kv *mvccpb.KeyValue, name string) (*acl.Policy, error) {
	var sp storedPolicy
	if err := decodeStrict(kv, &sp); err != nil {
		return nil, err
	}
	if sp.Name != name {
		return nil, fmt.Errorf("%w: etcd key %s holds policy %.140q", ErrCorrupt, kv.Key, sp.Name)
	}
	return &acl.Policy{Name: sp.Name, Description: sp.Description, Rules: sp.Rules,
		CreateIndex: uint64(kv.CreateRevision), ModifyIndex: uint64(kv.ModRevision)}, nil
}

// decodeToken decodes the token stored under tokens/<accessor>.
func decodeToken(kv *mvccpb.KeyValue, accessor string) (*acl.Token, error) {
	var st storedToken
	if err := decodeStrict(kv, &st); err != nil {
		return nil, err
	}
	switch {
	case st.AccessorID != accessor:
		return nil, fmt.Errorf("%w: etcd key %s holds token %.140q", ErrCorrupt, kv.Key, st.AccessorID)
	case !validSecretHash(st.SecretHash):
		return nil, fmt.Errorf("%w: etcd key %s: the token has no valid secret hash", ErrCorrupt, kv.Key)
	case st.Type != acl.TypeClient && st.Type != acl.TypeManagement:
		return nil, fmt.Errorf("%w: etcd key %s: token type %.40q", ErrCorrupt, kv.Key, st.Type)
	}
	return &acl.Token{AccessorID: st.AccessorID, SecretHash: st.SecretHash, Name: st.Name, Type: st.Type,
		Policies: st.Policies, Global: st.Global, CreateTime: st.CreateTime, ExpirationTime: st.ExpirationTime,
		ServiceIdentities: st.ServiceIdentities, AllocID: st.AllocID, TaskName: st.TaskName,
		CreateIndex: uint64(kv.CreateRevision), ModifyIndex: uint64(kv.ModRevision)}, nil
}

// lastSegment is the part of kv's key after dir.
func (s *EtcdStore) lastSegment(kv *mvccpb.KeyValue, dir string) string {
	return strings.TrimPrefix(string(kv.Key), s.key(dir))
}

// checkTokenFields checks what a token must be whatever exists: its type,
// its policies' presence by type, its name and times.
func checkTokenFields(t *acl.Token) error {
	switch t.Type {
	case acl.TypeManagement:
		if len(t.Policies) > 0 || len(t.ServiceIdentities) > 0 {
			return fmt.Errorf("%w: a management token may not have policies or service identities", acl.ErrInvalid)
		}
	case acl.TypeClient:
		if len(t.Policies) == 0 && len(t.ServiceIdentities) == 0 {
			return fmt.Errorf("%w: a client token needs at least one policy or service identity", acl.ErrInvalid)
		}
		if len(t.Policies) > maxTokenPolicies {
			return fmt.Errorf("%w: a token may have at most %d policies", acl.ErrInvalid, maxTokenPolicies)
		}
		for _, p := range t.Policies {
			if err := checkPolicyName(p); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%w: token type %.40q must be %q or %q", acl.ErrInvalid, t.Type, acl.TypeClient, acl.TypeManagement)
	}
	if len(t.Name) > maxNameLen {
		return fmt.Errorf("%w: token name longer than %d bytes", acl.ErrInvalid, maxNameLen)
	}
	if err := checkWorkloadFields(t); err != nil {
		return err
	}
	if t.ExpirationTime != nil && !t.ExpirationTime.After(t.CreateTime) {
		return fmt.Errorf("%w: token expiration time %s is not after its create time %s", acl.ErrInvalid,
			t.ExpirationTime.Format(time.RFC3339), t.CreateTime.Format(time.RFC3339))
	}
	return nil
}

// checkWorkloadFields checks a token's service identities (Consul's
// name rule) and its allocation binding.
func checkWorkloadFields(t *acl.Token) error {
	if len(t.ServiceIdentities) > maxTokenPolicies {
		return fmt.Errorf("%w: a token may have at most %d service identities", acl.ErrInvalid, maxTokenPolicies)
	}
	for _, si := range t.ServiceIdentities {
		if si == nil || !serviceIdentityRe.MatchString(si.ServiceName) {
			name := ""
			if si != nil {
				name = si.ServiceName
			}
			return fmt.Errorf("%w: service identity name %.140q must be 1 to 256 lowercase letters, digits, '-' and '_', starting and ending with a letter or digit",
				acl.ErrInvalid, name)
		}
	}
	if t.AllocID != "" {
		if !accessorRe.MatchString(t.AllocID) || len(t.TaskName) == 0 || len(t.TaskName) > maxNameLen {
			return fmt.Errorf("%w: a workload token needs a plain allocation ID and a task name of 1 to %d bytes", acl.ErrInvalid, maxNameLen)
		}
	} else if t.TaskName != "" {
		return fmt.Errorf("%w: a token's task name needs its allocation ID", acl.ErrInvalid)
	}
	return nil
}

// dedup returns names without repeats, in their first order.
func dedup(names []string) []string {
	seen := make(map[string]bool, len(names))
	out := make([]string, 0, len(names))
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}
