package agent

import (
	"time"

	"github.com/hashicorp/hcl/v2"
)

// DefaultACLTokenTTL is acl.token_ttl's default, as Nomad's.
const DefaultACLTokenTTL = 30 * time.Second

// ACLConfig is the agent's acl block, as Nomad's:
//
//	acl {
//	  enabled   = true
//	  token_ttl = "30s"
//	}
//
// Enabled makes every API request need a token (X-Nomad-Token or
// X-Consul-Token) whose policies allow it. TokenTTL is how long an agent
// may cache a resolved token and its policies, so a revoked token or a
// changed policy takes effect within TokenTTL. ACLs are off by default,
// in dev mode too (see ACLWarning).
type ACLConfig struct {
	Enabled  bool
	TokenTTL time.Duration
}

type fileACL struct {
	Enabled  *bool          `hcl:"enabled"`
	TokenTTL *hcl.Attribute `hcl:"token_ttl"`
}

// apply copies the file's acl block over c.
func (fa *fileACL) apply(c *ACLConfig) error {
	if fa == nil {
		return nil
	}
	set(&c.Enabled, fa.Enabled)
	return setDurations("acl", durationField{"token_ttl", fa.TokenTTL, &c.TokenTTL})
}

func (c *ACLConfig) problems() []string {
	if c.TokenTTL < 0 {
		return []string{"acl.token_ttl must not be negative"}
	}
	return nil
}

// aclDisabledWarning is ACLWarning's one line.
const aclDisabledWarning = "ACLs are disabled: any program that reaches the HTTP APIs can run jobs and read service keys; " +
	"enable acl { enabled = true } outside development"

// ACLWarning is the warning to log at start when ACLs are off (in dev
// mode or not), else "".
func (c *Config) ACLWarning() string {
	if c.ACL.Enabled {
		return ""
	}
	return aclDisabledWarning
}
