package command

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentFlagsCompleteConfigFile: a config file that leaves out what a
// flag supplies (data_dir with -data-dir or -dev, a bad bind_addr fixed by
// -bind) is accepted, as Nomad's flags override and complete its files;
// what is still wrong after the flags is refused naming the file.
func TestAgentFlagsCompleteConfigFile(t *testing.T) {
	noDataDir := writeFile(t, "agent.hcl", "datacenter = \"east\"\n")
	badBind := writeFile(t, "bind.hcl", "data_dir = \"/var/lib/meshlet\"\nbind_addr = \"nope\"\n")
	dataDir := filepath.Join(t.TempDir(), "data")
	tests := []struct {
		args    []string
		dataDir string
		dev     bool
	}{
		{[]string{"-config", noDataDir, "-data-dir", dataDir}, dataDir, false},
		{[]string{"-config", noDataDir, "-dev"}, "", true},
		{[]string{"-config", badBind, "-bind", "127.0.0.2"}, "/var/lib/meshlet", false},
	}
	for _, tc := range tests {
		fs := newFlags(commands["agent"])
		var f agentFlags
		f.define(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		cfg, err := agentConfig(fs, f)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if cfg.DataDir != tc.dataDir || cfg.Dev != tc.dev {
			t.Errorf("%v: data dir %q dev %v, want %q %v", tc.args, cfg.DataDir, cfg.Dev, tc.dataDir, tc.dev)
		}
	}
	r := runCLI(t, "", "agent", "-config", noDataDir)
	if r.code != 1 || !strings.Contains(r.stderr, noDataDir) || !strings.Contains(r.stderr, "data_dir is required") {
		t.Errorf("config without data_dir and no flag: exit %d %q", r.code, r.stderr)
	}
	if strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("error is not one line: %q", r.stderr)
	}
}

// TestAgentConfigGivenTwice: Nomad merges every -config; meshlet reads one
// file, so a second -config is refused instead of silently replacing the
// first (whose acl or tls block would be dropped).
func TestAgentConfigGivenTwice(t *testing.T) {
	first := writeFile(t, "acl.hcl", "data_dir = \"/var/lib/meshlet\"\nacl {\n  enabled = true\n}\n")
	second := writeFile(t, "more.hcl", "datacenter = \"east\"\n")
	r := runCLI(t, "", "agent", "-config", first, "-config", second)
	if r.code != 1 || !strings.HasPrefix(r.stderr, "Error: invalid value \""+second+"\" for flag -config: ") {
		t.Fatalf("exit %d stderr %q", r.code, r.stderr)
	}
	if !strings.Contains(strings.SplitN(r.stderr, "\n", 2)[0], "one config file") {
		t.Errorf("the error does not say why: %q", r.stderr)
	}
}

// TestAgentDevLogLevel: -dev means debug logs, with or without a config
// file, unless the file sets log_level or -log-level is given (Nomad reads
// its files over its dev config, then its flags).
func TestAgentDevLogLevel(t *testing.T) {
	plain := writeFile(t, "agent.hcl", "datacenter = \"east\"\n")
	quiet := writeFile(t, "quiet.hcl", "datacenter = \"east\"\nlog_level = \"info\"\n")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-dev"}, "debug"},
		{[]string{"-dev", "-config", plain}, "debug"},
		{[]string{"-config", plain, "-dev"}, "debug"},
		{[]string{"-dev", "-config", quiet}, "info"},
		{[]string{"-dev", "-config", plain, "-log-level", "WARN"}, "warn"},
		{[]string{"-config", plain, "-data-dir", t.TempDir()}, "info"},
	}
	for _, tc := range tests {
		fs := newFlags(commands["agent"])
		var f agentFlags
		f.define(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		cfg, err := agentConfig(fs, f)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if cfg.LogLevel != tc.want {
			t.Errorf("%v: log level %q, want %q", tc.args, cfg.LogLevel, tc.want)
		}
	}
}
