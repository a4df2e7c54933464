package docker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"

	"github.com/meshlet/meshlet/driver"
)

// Defaults of the plugin config's gates (Nomad's).
var defaultAllowRuntimes = []string{"runc", "nvidia"}

// optionKeys are the task config keys read by readOptions: Nomad's docker
// options beyond the image, command and mounts.
var optionKeys = []string{
	"cpuset_cpus", "devices", "dns_options", "dns_search_domains", "dns_servers", "extra_hosts", "healthchecks",
	"hostname", "init", "interactive", "ipc_mode", "pid_mode", "pids_limit", "readonly_rootfs", "runtime",
	"security_opt", "shm_size", "sysctl", "tty", "ulimit", "userns_mode", "uts_mode",
}

// options are a task's container options that map onto Docker's config
// and host config.
type options struct {
	Hostname         string
	DNSServers       []string
	DNSSearchDomains []string
	DNSOptions       []string
	// DroppedDNS are the dns_servers entries that are not IP addresses,
	// left out of DNSServers.
	DroppedDNS []string
	// ExtraHosts are "name:ip" entries.
	ExtraHosts []string
	IPCMode    string
	PIDMode    string
	// UTSMode and UsernsMode are "" or "host".
	UTSMode    string
	UsernsMode string
	// Init runs Docker's init (tini) as the container's PID 1.
	Init bool
	// PidsLimit bounds the container's processes (0: no limit).
	PidsLimit int64
	// CpusetCPUs is accepted and ignored, as Nomad does (logged).
	CpusetCPUs     string
	SecurityOpt    []string
	Sysctl         map[string]string
	Ulimits        []*container.Ulimit
	Devices        []container.DeviceMapping
	ShmSize        int64
	ReadonlyRootfs bool
	Runtime        string
	NoHealthcheck  bool
	TTY            bool
	Interactive    bool
}

// readOptions reads the options, checking each value's form.
func (r *reader) readOptions() options {
	o := options{
		Hostname:         r.str("hostname"),
		DNSServers:       r.strs("dns_servers", false),
		DNSSearchDomains: r.strs("dns_search_domains", false),
		DNSOptions:       r.strs("dns_options", false),
		ExtraHosts:       r.strs("extra_hosts", false),
		IPCMode:          r.str("ipc_mode"),
		PIDMode:          r.str("pid_mode"),
		UTSMode:          r.str("uts_mode"),
		UsernsMode:       r.str("userns_mode"),
		Init:             r.boolean("init"),
		PidsLimit:        r.integer("pids_limit"),
		CpusetCPUs:       r.str("cpuset_cpus"),
		SecurityOpt:      r.strs("security_opt", false),
		Sysctl:           r.strMap(r.m["sysctl"], "sysctl"),
		ShmSize:          r.integer("shm_size"),
		ReadonlyRootfs:   r.boolean("readonly_rootfs"),
		Runtime:          r.str("runtime"),
		TTY:              r.boolean("tty"),
		Interactive:      r.boolean("interactive"),
	}
	// Nomad drops a dns_servers entry that is not an IP address (with an
	// error in its log) rather than failing the task.
	o.DNSServers = slices.DeleteFunc(o.DNSServers, func(s string) bool {
		if net.ParseIP(s) == nil {
			o.DroppedDNS = append(o.DroppedDNS, s)
			return true
		}
		return false
	})
	for _, h := range o.ExtraHosts {
		name, ip, ok := strings.Cut(h, ":")
		if !ok || name == "" || net.ParseIP(ip) == nil {
			r.fail("extra_hosts: %q must be \"hostname:IP\"", h)
		}
	}
	if o.ShmSize < 0 {
		r.fail("shm_size must not be negative, got %d", o.ShmSize)
	}
	if o.PidsLimit < 0 {
		r.fail("pids_limit must not be negative, got %d", o.PidsLimit)
	}
	for _, m := range []struct{ key, val string }{{"uts_mode", o.UTSMode}, {"userns_mode", o.UsernsMode}} {
		if m.val != "" && m.val != "host" {
			r.fail("%s must be \"host\" or unset, got %q", m.key, m.val)
		}
	}
	if hc := r.block("healthchecks", []string{"disable"}); hc != nil {
		sub := reader{m: hc}
		o.NoHealthcheck = sub.boolean("disable")
		r.errs = append(r.errs, sub.errs...)
	}
	o.Ulimits = r.ulimits()
	o.Devices = r.devices()
	return o
}

// ulimits reads ulimit = { nofile = "1024:2048", nproc = "64" } (a soft
// limit alone is also the hard one).
func (r *reader) ulimits() []*container.Ulimit {
	m := r.strMap(r.m["ulimit"], "ulimit")
	var out []*container.Ulimit
	for _, name := range slices.Sorted(maps.Keys(m)) {
		v := m[name]
		softS, hardS, hasHard := strings.Cut(v, ":")
		soft, err1 := strconv.ParseInt(softS, 10, 64)
		hard, err2 := soft, error(nil)
		if hasHard {
			hard, err2 = strconv.ParseInt(hardS, 10, 64)
		}
		switch {
		case name == "":
			r.fail("ulimit: empty name")
		case err1 != nil || err2 != nil || soft < 0 || hard < 0:
			r.fail("ulimit %s: %q must be \"soft\" or \"soft:hard\" (whole numbers)", name, v)
		case soft > hard:
			r.fail("ulimit %s: soft limit %d is above the hard limit %d", name, soft, hard)
		default:
			out = append(out, &container.Ulimit{Name: name, Soft: soft, Hard: hard})
		}
	}
	return out
}

// devices reads the devices blocks: host_path (required), container_path
// (default host_path), cgroup_permissions (default "rwm").
func (r *reader) devices() []container.DeviceMapping {
	var out []container.DeviceMapping
	for i, b := range blockList(r.m["devices"]) {
		name := fmt.Sprintf("devices[%d]", i)
		if err := onlyKeys(b, name, "host_path", "container_path", "cgroup_permissions"); err != nil {
			r.errs = append(r.errs, err)
			continue
		}
		sub := reader{m: b}
		dm := container.DeviceMapping{PathOnHost: sub.str("host_path"), PathInContainer: sub.str("container_path"),
			CgroupPermissions: sub.str("cgroup_permissions")}
		if dm.PathOnHost == "" {
			sub.fail("%s: host_path is required", name)
		}
		if dm.PathInContainer == "" {
			dm.PathInContainer = dm.PathOnHost
		}
		if dm.CgroupPermissions == "" {
			dm.CgroupPermissions = "rwm"
		}
		if strings.Trim(dm.CgroupPermissions, "rwm") != "" {
			sub.fail("%s: cgroup_permissions %q may only hold r, w and m", name, dm.CgroupPermissions)
		}
		r.errs = append(r.errs, sub.errs...)
		out = append(out, dm)
	}
	return out
}

// checkOptions checks the options against the plugin config (Nomad's
// gates: ipc_mode and pid_mode need allow_privileged or a match in
// allowed_modes; runtime must be in allow_runtimes) and against the
// network: a task joining the allocation's namespace cannot set hostname,
// since Docker refuses a hostname for a container that uses another's
// network (Nomad fails the same way).
func (c *Config) checkOptions(o *options, joinAlloc bool) error {
	for _, m := range []struct{ key, val, gate string }{
		{"ipc_mode", o.IPCMode, "ipc"}, {"pid_mode", o.PIDMode, "pid"},
	} {
		if m.val == "" || c.AllowPrivileged || slices.ContainsFunc(c.AllowedModes[m.gate], func(p string) bool { return globMatch(p, m.val) }) {
			continue
		}
		return fmt.Errorf("%s %q is %w: set allow_privileged = true or allowed_modes { %s = [%q] }", m.key, m.val, ErrNotAllowed, m.gate, m.val)
	}
	// Nomad documents uts_mode = "host" as needing privileged containers
	// allowed; meshlet gates userns_mode = "host" (leaving Docker's user
	// namespace remapping) the same way.
	for _, m := range []struct{ key, val string }{{"uts_mode", o.UTSMode}, {"userns_mode", o.UsernsMode}} {
		if m.val != "" && !c.AllowPrivileged {
			return fmt.Errorf("%s %q is %w: set allow_privileged = true", m.key, m.val, ErrNotAllowed)
		}
	}
	allow := c.AllowRuntimes
	if allow == nil {
		allow = defaultAllowRuntimes
	}
	if o.Runtime != "" && !slices.Contains(allow, o.Runtime) {
		return fmt.Errorf("runtime %q is %w: allow_runtimes is %q", o.Runtime, ErrNotAllowed, allow)
	}
	if joinAlloc && o.Hostname != "" {
		return fmt.Errorf("%w: hostname cannot be set on a task that joins the allocation's network namespace (Docker refuses a hostname with another container's network); set the group's network { hostname } instead", ErrBadConfig)
	}
	return nil
}

// globMatch matches s against a pattern where "*" stands for any run of
// characters (Nomad's allowed_modes globs).
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, parts[len(parts)-1])
}

// applyOptions sets the options on the container's config and host
// config. joinAlloc: the container joins the allocation's namespace,
// where Docker refuses DNS settings and extra hosts, so they are written
// to resolv.conf and hosts files in the task directory and bound over
// /etc/resolv.conf and /etc/hosts (as Nomad does for extra_hosts). A
// group dns block (dns) replaces the dns options and is always written
// to resolv.conf, as in Nomad.
func applyOptions(o *options, taskDir string, an *allocNet, dns *driver.DNSConfig, cc *container.Config, hc *container.HostConfig) error {
	joinAlloc := an != nil
	cc.Hostname, cc.Tty, cc.OpenStdin = o.Hostname, o.TTY, o.Interactive
	if o.NoHealthcheck {
		cc.Healthcheck = &container.HealthConfig{Test: []string{"NONE"}}
	}
	hc.IpcMode, hc.PidMode = container.IpcMode(o.IPCMode), container.PidMode(o.PIDMode)
	hc.UTSMode, hc.UsernsMode = container.UTSMode(o.UTSMode), container.UsernsMode(o.UsernsMode)
	if o.Init {
		hc.Init = &o.Init
	}
	if o.PidsLimit > 0 {
		hc.PidsLimit = &o.PidsLimit
	}
	hc.Sysctls, hc.Ulimits, hc.Devices = o.Sysctl, o.Ulimits, o.Devices
	hc.ShmSize, hc.ReadonlyRootfs, hc.Runtime = o.ShmSize, o.ReadonlyRootfs, o.Runtime
	opts, err := securityOpts(o.SecurityOpt)
	if err != nil {
		return err
	}
	hc.SecurityOpt = opts
	dnsOpts, dnsFile := o, joinAlloc && len(o.DNSServers)+len(o.DNSSearchDomains)+len(o.DNSOptions) > 0
	if dns != nil {
		dnsOpts, dnsFile = &options{DNSServers: dns.Servers, DNSSearchDomains: dns.Searches, DNSOptions: dns.Options}, true
	}
	// The allocation's own line needs a task directory for the file; only
	// extra_hosts make it a must.
	hostsFile := joinAlloc && (len(o.ExtraHosts) > 0 || an.address != "" && an.hostname != "" && taskDir != "")
	if !dnsFile && dns == nil {
		hc.DNS, hc.DNSSearch, hc.DNSOptions = o.DNSServers, o.DNSSearchDomains, o.DNSOptions
	}
	if !joinAlloc {
		hc.ExtraHosts = o.ExtraHosts
	}
	if (dnsFile || hostsFile) && taskDir == "" {
		return fmt.Errorf("%w: dns and extra_hosts options need a task directory", ErrBadConfig)
	}
	if dnsFile {
		path := filepath.Join(taskDir, "resolv.conf")
		if err := os.WriteFile(path, resolvConf(dnsOpts, hostResolvConf()), 0o644); err != nil {
			return fmt.Errorf("failed to write resolv.conf: %w", err)
		}
		hc.Binds = append(hc.Binds, path+":/etc/resolv.conf:ro")
	}
	if hostsFile {
		path := filepath.Join(taskDir, "hosts")
		if err := os.WriteFile(path, etcHosts(an, o.ExtraHosts), 0o644); err != nil {
			return fmt.Errorf("failed to write hosts file: %w", err)
		}
		hc.Binds = append(hc.Binds, path+":/etc/hosts:ro")
	}
	return nil
}

// securityOpts passes security_opt to Docker as its CLI does: a
// "seccomp=<file>" profile is read from the client's disk and sent inline.
func securityOpts(in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	for _, opt := range in {
		k, v, ok := strings.Cut(opt, "=")
		if !ok && opt != "no-new-privileges" {
			if k, v, ok = strings.Cut(opt, ":"); !ok {
				return nil, fmt.Errorf("%w: security_opt %q must be \"key=value\" or \"no-new-privileges\"", ErrBadConfig, opt)
			}
		}
		if k == "seccomp" && v != "unconfined" {
			raw, err := os.ReadFile(v)
			if err != nil {
				return nil, fmt.Errorf("%w: security_opt seccomp profile: %w", ErrBadConfig, err)
			}
			var b bytes.Buffer
			if err := json.Compact(&b, raw); err != nil {
				return nil, fmt.Errorf("%w: security_opt seccomp profile %s is not JSON: %w", ErrBadConfig, v, err)
			}
			opt = "seccomp=" + b.String()
		}
		out = append(out, opt)
	}
	return out, nil
}

// The host's resolver configuration, and systemd-resolved's list of the
// upstream servers behind its 127.0.0.53 stub.
var (
	resolvConfFile   = "/etc/resolv.conf"
	resolvedUpstream = "/run/systemd/resolve/resolv.conf"
)

// resolver is a parsed resolv.conf.
type resolver struct {
	servers, search, options []string
}

// hostResolvConf reads the host's resolv.conf, leaving out loopback
// nameservers (unreachable from a container's namespace), as Docker does;
// behind systemd-resolved's stub it reads the upstream servers' file.
func hostResolvConf() resolver {
	rc := parseResolvConf(resolvConfFile)
	if len(rc.servers) == 0 {
		if up := parseResolvConf(resolvedUpstream); len(up.servers) > 0 {
			return up
		}
	}
	return rc
}

// parseResolvConf parses a resolv.conf (empty if unreadable).
func parseResolvConf(path string) resolver {
	var rc resolver
	data, err := os.ReadFile(path)
	if err != nil {
		return rc
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if ip := net.ParseIP(f[1]); ip != nil && !ip.IsLoopback() {
				rc.servers = append(rc.servers, f[1])
			}
		case "search", "domain":
			rc.search = f[1:]
		case "options":
			rc.options = append(rc.options, f[1:]...)
		}
	}
	return rc
}

// resolvConf is the task's resolv.conf: each of dns_servers,
// dns_search_domains and dns_options replaces the host's.
func resolvConf(o *options, host resolver) []byte {
	if len(o.DNSServers) > 0 {
		host.servers = o.DNSServers
	}
	if len(o.DNSSearchDomains) > 0 {
		host.search = o.DNSSearchDomains
	}
	if len(o.DNSOptions) > 0 {
		host.options = o.DNSOptions
	}
	var b strings.Builder
	b.WriteString("# written by meshlet from the task's dns settings\n")
	for _, s := range host.servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	if len(host.search) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(host.search, " "))
	}
	if len(host.options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(host.options, " "))
	}
	return []byte(b.String())
}

// etcHosts is the task's /etc/hosts in Nomad's layout: the loopback and
// IPv6 multicast names, the allocation's own address and hostname (when
// known), then the extra_hosts entries.
func etcHosts(an *allocNet, extra []string) []byte {
	var b strings.Builder
	b.WriteString("# written by meshlet for the task's allocation network\n")
	b.WriteString("127.0.0.1 localhost\n::1 localhost\n::1 ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0 ip6-localnet\nff00::0 ip6-mcastprefix\nff02::1 ip6-allnodes\nff02::2 ip6-allrouters\nff02::3 ip6-allhosts\n")
	if an != nil && an.address != "" && an.hostname != "" {
		fmt.Fprintf(&b, "\n# the allocation's address and hostname, shared by the group's tasks\n%s %s\n", an.address, an.hostname)
	}
	if len(extra) > 0 {
		b.WriteString("\n# extra_hosts from the task config\n")
	}
	for _, h := range extra {
		name, ip, _ := strings.Cut(h, ":")
		fmt.Fprintf(&b, "%s %s\n", ip, name)
	}
	return []byte(b.String())
}
