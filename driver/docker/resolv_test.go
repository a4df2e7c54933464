package docker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The task's resolv.conf: each dns option replaces the host's part;
// loopback nameservers are dropped; behind systemd-resolved's stub the
// upstream servers are used.
func TestResolvConf(t *testing.T) {
	dir := t.TempDir()
	host, upstream := filepath.Join(dir, "resolv.conf"), filepath.Join(dir, "upstream.conf")
	oldHost, oldUp := resolvConfFile, resolvedUpstream
	t.Cleanup(func() { resolvConfFile, resolvedUpstream = oldHost, oldUp })
	resolvConfFile, resolvedUpstream = host, upstream
	write := func(path, body string) {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(host, "nameserver 127.0.0.1\nnameserver 10.0.0.2\nsearch host.example\noptions edns0\n")
	got := string(resolvConf(&options{DNSSearchDomains: []string{"svc.example"}}, hostResolvConf()))
	if !strings.Contains(got, "nameserver 10.0.0.2\nsearch svc.example\noptions edns0\n") || strings.Contains(got, "127.0.0.1") {
		t.Errorf("resolv.conf =\n%s", got)
	}
	write(host, "nameserver 127.0.0.53\nsearch lan\n")
	write(upstream, "nameserver 10.9.9.9\nsearch lan\n")
	got = string(resolvConf(&options{DNSOptions: []string{"ndots:3"}}, hostResolvConf()))
	if !strings.Contains(got, "nameserver 10.9.9.9\nsearch lan\noptions ndots:3\n") {
		t.Errorf("resolv.conf behind systemd-resolved =\n%s", got)
	}
}
