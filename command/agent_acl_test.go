package command

import (
	"flag"
	"io"
	"testing"
)

// TestAgentACLFlag: -acl-enabled turns ACLs on over -dev and over a
// config file's acl block; without it the file's setting stands.
func TestAgentACLFlag(t *testing.T) {
	file := writeFile(t, "agent.hcl", "data_dir = \"/tmp/x\"\nacl {\n  enabled   = false\n  token_ttl = \"10s\"\n}\n")
	on := writeFile(t, "on.hcl", "data_dir = \"/tmp/x\"\nacl { enabled = true }\n")
	tests := []struct {
		args []string
		want bool
	}{
		{[]string{"-dev"}, false},
		{[]string{"-dev", "-acl-enabled"}, true},
		{[]string{"-config", file}, false},
		{[]string{"-config", file, "-acl-enabled"}, true},
		{[]string{"-config", on}, true},
		{[]string{"-config", on, "-acl-enabled=false"}, false},
	}
	for _, tc := range tests {
		fs := flag.NewFlagSet("agent", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f agentFlags
		f.define(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		cfg, err := agentConfig(fs, f)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if cfg.ACL.Enabled != tc.want || (cfg.ACLWarning() == "") != tc.want {
			t.Errorf("%v: ACL %+v, warning %q; want enabled %v", tc.args, cfg.ACL, cfg.ACLWarning(), tc.want)
		}
	}
}
