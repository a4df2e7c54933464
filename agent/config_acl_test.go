package agent

import (
	"strings"
	"testing"
	"time"
)

func TestParseConfigACL(t *testing.T) {
	tests := []struct {
		name        string
		src         string
		wantErr     string
		wantEnabled bool
		wantTTL     time.Duration
	}{
		{name: "default: off, 30s", src: `data_dir = "/x"`, wantTTL: 30 * time.Second},
		{name: "enabled with ttl", src: "data_dir = \"/x\"\nacl {\n  enabled   = true\n  token_ttl = \"45s\"\n}\n",
			wantEnabled: true, wantTTL: 45 * time.Second},
		{name: "enabled keeps the default ttl", src: "data_dir = \"/x\"\nacl { enabled = true }\n",
			wantEnabled: true, wantTTL: 30 * time.Second},
		{name: "unknown key has a position", src: "data_dir = \"/x\"\nacl {\n  enabled = true\n  policy_tll = \"30s\"\n}\n",
			wantErr: "agent.hcl:4:3: Unsupported argument"},
		{name: "wrong type has a position", src: "data_dir = \"/x\"\nacl {\n  enabled = \"maybe\"\n}\n",
			wantErr: "agent.hcl:3:14: Unsuitable value type"},
		{name: "bad duration", src: "data_dir = \"/x\"\nacl {\n  token_ttl = \"soon\"\n}\n",
			wantErr: `invalid agent configuration: agent.hcl:3:15: Invalid duration; acl.token_ttl: time: invalid duration "soon"`},
		{name: "negative duration", src: "data_dir = \"/x\"\nacl { token_ttl = \"-1s\" }\n",
			wantErr: "acl.token_ttl must not be negative"},
		{name: "two blocks", src: "data_dir = \"/x\"\nacl {}\nacl {}\n", wantErr: "agent.hcl:3:1: Duplicate acl block"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig("agent.hcl", []byte(tc.src))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.ACL.Enabled != tc.wantEnabled || c.ACL.TokenTTL != tc.wantTTL {
				t.Errorf("ACL = %+v, want enabled %v, ttl %v", c.ACL, tc.wantEnabled, tc.wantTTL)
			}
		})
	}
}

// TestACLWarning: one line whenever ACLs are off, in dev mode or not.
func TestACLWarning(t *testing.T) {
	for _, c := range []*Config{DevConfig(), DefaultConfig()} {
		w := c.ACLWarning()
		if !strings.HasPrefix(w, "ACLs are disabled:") || strings.Contains(w, "\n") {
			t.Errorf("dev %v: warning %q", c.Dev, w)
		}
		c.ACL.Enabled = true
		if w := c.ACLWarning(); w != "" {
			t.Errorf("dev %v with ACLs: warning %q", c.Dev, w)
		}
	}
}
