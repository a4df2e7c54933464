package cni

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/hashicorp/go-hclog"
	"github.com/meshlet/meshlet/structs"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestBuildConfListGolden(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
	}{
		{"defaults", Config{}},
		{"custom", Config{BridgeName: "br-test", Subnet: "10.251.7.0/24", NetworkName: "testnet",
			StateDir: "/srv/meshlet/cni", AdminChain: "TEST-ADMIN"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BuildConfList(tc.cfg)
			if err != nil {
				t.Fatalf("BuildConfList: %v", err)
			}
			golden := filepath.Join("testdata", tc.name+".conflist.golden")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("read golden (run with -update to create it): %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("conflist differs from %s (run with -update if intended):\n%s", golden, got)
			}
			// The generated JSON must be what libcni and the plugins parse.
			list, err := libcni.NetworkConfFromBytes(got)
			if err != nil {
				t.Fatalf("libcni rejects generated conflist: %v", err)
			}
			if want := []string{"loopback", "bridge", "host-local", "firewall", "portmap"}; !reflect.DeepEqual(requiredPlugins(list), want) {
				t.Fatalf("requiredPlugins = %v, want %v", requiredPlugins(list), want)
			}
		})
	}
}

func TestPortMappings(t *testing.T) {
	cases := []struct {
		name    string
		in      []structs.PortMapping
		want    []PortMapEntry
		wantErr error
	}{
		{"none", nil, []PortMapEntry{}, nil},
		{"static same port", []structs.PortMapping{{Label: "http", Value: 8080}},
			[]PortMapEntry{{8080, 8080, "tcp"}, {8080, 8080, "udp"}}, nil},
		{"to -1 means same", []structs.PortMapping{{Label: "http", Value: 9000, To: -1}},
			[]PortMapEntry{{9000, 9000, "tcp"}, {9000, 9000, "udp"}}, nil},
		{"dynamic to", []structs.PortMapping{{Label: "http", Value: 23456, To: 80, HostIP: "10.0.0.1"}},
			[]PortMapEntry{{23456, 80, "tcp"}, {23456, 80, "udp"}}, nil},
		{"two ports", []structs.PortMapping{{Label: "a", Value: 1000, To: 1}, {Label: "b", Value: 2000}},
			[]PortMapEntry{{1000, 1, "tcp"}, {1000, 1, "udp"}, {2000, 2000, "tcp"}, {2000, 2000, "udp"}}, nil},
		{"zero host port", []structs.PortMapping{{Label: "a", Value: 0, To: 80}}, nil, ErrInvalidAllocation},
		{"too large", []structs.PortMapping{{Label: "a", Value: 70000}}, nil, ErrInvalidAllocation},
		{"duplicate host port", []structs.PortMapping{{Label: "a", Value: 1000}, {Label: "b", Value: 1000, To: 5}}, nil, ErrInvalidAllocation},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PortMappings(tc.in)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	pluginErr := func(msg string) error {
		return errors.New(`plugin type="bridge" failed (add): ` + (&types.Error{Code: 999, Msg: msg}).Error())
	}
	cases := []struct {
		name     string
		err      error
		want     error
		contains string
	}{
		{"exhausted", pluginErr("failed to allocate for range 0: no IP addresses available in range set: 10.1.0.1-10.1.0.2"),
			ErrSubnetExhausted, `no free address in subnet 10.1.0.0/30`},
		{"iptables", pluginErr(`failed to locate iptables: exec: "iptables": executable file not found in $PATH`),
			ErrIptablesMissing, "install iptables"},
		{"plugin", errors.New(`failed to find plugin "bridge" in path [/x]`), ErrPluginMissing, "run `make cni`"},
		{"permission", errors.New("failed to unshare network namespace: operation not permitted"), ErrPermission, "run meshlet as root"},
		{"other", pluginErr("something broke\nbadly"), ErrPluginFailed, `CNI network "n" failed: plugin type="bridge"`},
		{"already classified", pluginMissingError("x", "/d"), ErrPluginMissing, `CNI plugin "x" not found in /d`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := classify(tc.err, "n", "10.1.0.0/30")
			if !errors.Is(got, tc.want) {
				t.Fatalf("classify = %v, want %v", got, tc.want)
			}
			if !strings.Contains(got.Error(), tc.contains) || strings.Contains(got.Error(), "\n") {
				t.Fatalf("message %q: want one line containing %q", got, tc.contains)
			}
		})
	}
	if classify(nil, "n", "s") != nil {
		t.Fatal("classify(nil) != nil")
	}
}

func TestNewValidatesConfig(t *testing.T) {
	cases := []struct {
		name     string
		cfg      Config
		contains string
	}{
		{"bad subnet", Config{Subnet: "nope"}, `subnet "nope" is not a CIDR`},
		{"ipv6 subnet", Config{Subnet: "fd00::/64"}, "must be IPv4"},
		{"tiny subnet", Config{Subnet: "10.0.0.0/31"}, "too small"},
		{"host bits", Config{Subnet: "10.0.0.1/24"}, "did you mean 10.0.0.0/24"},
		{"long bridge", Config{BridgeName: "a-very-long-bridge-name"}, "not a valid interface name"},
		{"bad network", Config{NetworkName: "bad name"}, `network name "bad name" is invalid`},
		{"long chain", Config{AdminChain: strings.Repeat("A", 29)}, "not a valid iptables chain name"},
		{"relative dir", Config{StateDir: "state"}, `state dir "state" must be an absolute path`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg, nil)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("New = %v, want ErrInvalidConfig containing %q", err, tc.contains)
			}
		})
	}
	m, err := New(Config{}, hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("New(defaults) = %v", err)
	}
	if got := m.NetNSPath("abc"); got != "/var/run/netns/abc" {
		t.Fatalf("NetNSPath = %q", got)
	}
}

func TestModeOf(t *testing.T) {
	cases := []struct {
		name  string
		alloc *structs.Allocation
		want  string
	}{
		{"nil", nil, "host"},
		{"no job", &structs.Allocation{}, "host"},
		{"no networks", testAlloc(""), "host"},
		{"bridge", testAlloc("bridge"), "bridge"},
		{"cni", testAlloc("cni/mynet"), "cni/mynet"},
		{"none", testAlloc("none"), "none"},
	}
	for _, tc := range cases {
		if got := ModeOf(tc.alloc); got != tc.want {
			t.Errorf("%s: ModeOf = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestCNIArgs(t *testing.T) {
	a := testAlloc("bridge")
	a.JobID = "web;x" // not representable in CNI_ARGS: left out
	got := cniArgs(a)
	want := [][2]string{{"IgnoreUnknown", "true"}, {"NOMAD_REGION", "global"}, {"NOMAD_NAMESPACE", "default"},
		{"NOMAD_GROUP_NAME", "g"}, {"NOMAD_ALLOC_ID", a.ID}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("cniArgs = %v, want %v", got, want)
	}
}

func TestSplitRule(t *testing.T) {
	cases := []struct {
		line string
		want []string
	}{
		{`-A POSTROUTING -s 10.1.1.2/32 -m comment --comment "name: \"net\" id: \"abc\"" -j CNI-x`,
			[]string{"-A", "POSTROUTING", "-s", "10.1.1.2/32", "-m", "comment", "--comment", `name: "net" id: "abc"`, "-j", "CNI-x"}},
		{`-N CNI-DN-1`, []string{"-N", "CNI-DN-1"}},
		{`  `, nil},
	}
	for _, tc := range cases {
		got, err := splitRule(tc.line)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("splitRule(%q) = %q, %v; want %q", tc.line, got, err, tc.want)
		}
	}
	if _, err := splitRule(`-A X --comment "open`); err == nil {
		t.Error("unterminated quote: want error")
	}
	chains, rules := parseRules("nat", []byte("-P OUTPUT ACCEPT\n-N CNI-a\n"+
		`-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"n1\" id: \"id1\"" -m multiport --dports 80 -j CNI-DN-a`+"\n"))
	if !chains["CNI-a"] || len(rules) != 1 {
		t.Fatalf("parseRules: chains %v rules %v", chains, rules)
	}
	if n, id, ok := rules[0].tagOf(); !ok || n != "n1" || id != "id1" || rules[0].target() != "CNI-DN-a" {
		t.Fatalf("tagOf = %q %q %v, target %q", n, id, ok, rules[0].target())
	}
}

// fakePluginDir holds executable placeholders for the named plugins.
func fakePluginDir(t *testing.T, names ...string) string {
	dir := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestPreflightErrors: errors found before anything is created, so they
// need no root.
func TestPreflightErrors(t *testing.T) {
	all := []string{"loopback", "bridge", "host-local", "firewall", "portmap"}
	cases := []struct {
		name     string
		plugins  []string
		mode     string
		noIPT    bool
		want     error
		contains string
	}{
		{"missing bridge", []string{"loopback", "host-local", "firewall", "portmap"}, "bridge", false,
			ErrPluginMissing, `CNI plugin "bridge" not found in %DIR%; run ` + "`make cni`" + ` or set cni_path`},
		{"missing ipam", []string{"loopback", "bridge", "firewall", "portmap"}, "bridge", false,
			ErrPluginMissing, `CNI plugin "host-local" not found`},
		{"missing iptables", all, "bridge", true, ErrIptablesMissing, "install iptables"},
		{"unknown mode", all, "macvlan", false, ErrUnsupportedMode, `network mode "macvlan" is not supported`},
		{"unknown cni network", all, "cni/nope", false, ErrNetworkNotFound, `CNI network "nope" not found in %CONF%`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, conf, state := fakePluginDir(t, tc.plugins...), t.TempDir(), t.TempDir()
			m, err := New(Config{PluginDir: dir, ConfigDir: conf, StateDir: state, NetNSDir: t.TempDir()}, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			if tc.noIPT {
				m.lookPath = func(string) (string, error) { return "", exec.ErrNotFound }
			}
			status, err := m.Setup(context.Background(), testAlloc(tc.mode))
			want := strings.NewReplacer("%DIR%", dir, "%CONF%", conf).Replace(tc.contains)
			if status != nil || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), want) {
				t.Fatalf("Setup = %v, %v; want %v containing %q", status, err, tc.want, want)
			}
			if entries, _ := os.ReadDir(state); len(entries) != 0 {
				t.Fatalf("state dir not empty after a failed preflight: %v", entries)
			}
		})
	}
}

func TestHostAndNoneAreNoops(t *testing.T) {
	m, err := New(Config{PluginDir: t.TempDir(), StateDir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"", "host", "none"} {
		a := testAlloc(mode)
		st, err := m.Setup(context.Background(), a)
		if st != nil || err != nil {
			t.Fatalf("Setup(%q) = %v, %v; want nil, nil", mode, st, err)
		}
		st, err = m.Restore(context.Background(), a)
		if st != nil || err != nil {
			t.Fatalf("Restore(%q) = %v, %v; want nil, nil", mode, st, err)
		}
		if err := m.Teardown(context.Background(), a); err != nil {
			t.Fatalf("Teardown(%q) = %v", mode, err)
		}
	}
}

func TestStatusOf(t *testing.T) {
	zero, one := 0, 1
	res := &current.Result{CNIVersion: "1.0.0",
		Interfaces: []*current.Interface{{Name: "meshlet"}, {Name: "eth0", Sandbox: "/var/run/netns/x"}},
		IPs: []*current.IPConfig{
			{Interface: &zero, Address: mustCIDR(t, "10.0.0.1/24")},
			{Interface: &one, Address: mustCIDR(t, "fd00::2/64")},
			{Interface: &one, Address: mustCIDR(t, "10.0.0.2/24")},
		}}
	nw := &structs.NetworkResource{DNS: &structs.DNSConfig{Servers: []string{"1.1.1.1"}}}
	st, err := statusOf(res, nw)
	if err != nil || st.Address != "10.0.0.2" || st.InterfaceName != "eth0" || st.DNS == nil || st.DNS.Servers[0] != "1.1.1.1" {
		t.Fatalf("statusOf = %+v, %v", st, err)
	}
	res.IPs = res.IPs[:2]
	if _, err := statusOf(res, nil); !errors.Is(err, ErrPluginFailed) {
		t.Fatalf("statusOf without eth0 IPv4 = %v, want ErrPluginFailed", err)
	}
}
