package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/internal/etcdembed"
	"github.com/meshlet/meshlet/server"
	"github.com/meshlet/meshlet/state"
)

// etcdStartTimeout bounds the start of the embedded member and the first
// contact with an external cluster.
const etcdStartTimeout = 60 * time.Second

// etcdDir is the embedded member's data dir.
func etcdDir(dataDir string) string { return filepath.Join(dataDir, "server", "etcd") }

// legacyStatePath is the bbolt file of servers before etcd (see
// state.MigrateBolt).
func legacyStatePath(dataDir string) string { return filepath.Join(dataDir, "server", "state.db") }

// openServerState connects the server role to etcd (the embedded member
// by default, or server.etcd.endpoints), imports a pre-etcd state file if
// there is one, and opens the state store. The marker outside server/
// makes losing the member's directory (or an external cluster's data) an
// error instead of a new cluster.
func (a *Agent) openServerState() (state.Store, *server.EtcdLeadership, error) {
	ctx, cancel := context.WithTimeout(context.Background(), etcdStartTimeout)
	defer cancel()
	cli, err := a.connectEtcd(ctx)
	if err != nil {
		return nil, nil, err
	}
	prefix := a.cfg.Server.Etcd.Prefix
	if prefix == "" {
		prefix = DefaultEtcdPrefix
	}
	opts := state.EtcdOptions{Prefix: prefix + "state/", JobVersions: a.cfg.Server.JobTrackedVersions,
		MarkerPath: serverMarker(a.cfg.DataDir), Logger: a.logger.Named("state")}
	if a.etcdMember != nil {
		opts.DiskCheck = memberDiskCheck(etcdDir(a.cfg.DataDir))
	}
	if err := state.MigrateBolt(ctx, legacyStatePath(a.cfg.DataDir), cli, opts); err != nil {
		return nil, nil, err
	}
	st, err := state.OpenEtcd(ctx, cli, opts)
	if err != nil {
		return nil, nil, err
	}
	id, err := serverID(a.cfg.DataDir)
	if err == nil {
		err = a.openMeshStore(ctx, cli, prefix+"connect/")
	}
	if err == nil && a.cfg.ACL.Enabled {
		a.openACLStore(cli, prefix+"acl/")
	}
	if err != nil {
		_ = st.Close()
		return nil, nil, err
	}
	lead := &server.EtcdLeadership{Client: cli, Prefix: prefix, Name: a.memberName(), ID: id, Addr: a.RPCAddr(),
		Logger: a.logger.Named("leader")}
	if a.etcdMember != nil {
		lead.Expect = a.cfg.Cluster.BootstrapExpect
		lead.Used = func() bool { return st.Index() > 0 }
	}
	return st, lead, nil
}

// connectEtcd starts the embedded member or connects to the configured
// cluster; the agent closes either at stop, after the store.
func (a *Agent) connectEtcd(ctx context.Context) (*clientv3.Client, error) {
	ec := a.cfg.Server.Etcd
	if len(ec.Endpoints) > 0 {
		var tlsFiles *etcdembed.TLSFiles
		if ec.CAFile != "" {
			tlsFiles = &etcdembed.TLSFiles{CAFile: ec.CAFile, CertFile: ec.CertFile, KeyFile: ec.KeyFile}
		}
		cli, err := etcdembed.Connect(ctx, etcdembed.ClientConfig{Endpoints: ec.Endpoints, TLS: tlsFiles,
			DialTimeout: 5 * time.Second, Logger: a.logger.Named("etcd")})
		if err != nil {
			return nil, fmt.Errorf("failed to connect to etcd: %w", err)
		}
		a.etcdClient = cli
		return cli, nil
	}
	if err := checkMember(a.cfg.DataDir); err != nil {
		return nil, err
	}
	m, clientURL, peerURL, err := a.startMember(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to start the embedded etcd member in %s: %w", etcdDir(a.cfg.DataDir), err)
	}
	a.etcdMember, a.etcdURLs = m, []string{clientURL, peerURL}
	a.keepHeadroom(m)
	return m.Client(), nil
}

// startMember starts the embedded member. A port picked free (etcd_client,
// or a lone server's peer port, unset) can be taken by another socket
// before the member binds it: that start is tried again with new ports.
func (a *Agent) startMember(ctx context.Context) (m *etcdembed.Member, clientURL, peerURL string, err error) {
	picked := a.cfg.Ports.EtcdClient == 0 || (!a.cfg.clustered() && a.cfg.Ports.EtcdPeer == 0)
	for attempt := 1; ; attempt++ {
		if clientURL, peerURL, err = a.memberURLs(); err != nil {
			return nil, "", "", err
		}
		name := a.memberName()
		initial, err := a.joinCluster(ctx, name, peerURL)
		if err != nil {
			return nil, "", "", err
		}
		mc := etcdembed.Config{DataDir: etcdDir(a.cfg.DataDir), Name: name,
			ClientURL: clientURL, PeerURL: peerURL, PeerTLS: a.peerTLS(), Logger: a.logger.Named("etcd"), Dev: a.cfg.Dev}
		if initial != "" {
			mc.InitialCluster, mc.ClusterState = initial, "existing"
		}
		m, err = etcdembed.Start(ctx, mc)
		// A joining member's start is not tried again: the cluster already
		// counts it.
		if err == nil || !picked || initial != "" || attempt == 3 || !errors.Is(err, syscall.EADDRINUSE) {
			return m, clientURL, peerURL, err
		}
		a.logger.Warn("a port picked for the embedded etcd member was taken meanwhile; picking again", "error", err)
	}
}

// memberName names this server's etcd member: its node name, unique
// among servers.
func (a *Agent) memberName() string {
	if a.cfg.NodeName != "" {
		return a.cfg.NodeName
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "meshlet"
}

// memberURLs are the embedded member's client and peer URLs: loopback
// (free ports unless set) for a lone server, bind_addr with the etcd
// ports (default 2379 and 2380) for a server with others.
func (a *Agent) memberURLs() (clientURL, peerURL string, err error) {
	// The client port is for this process only (the in-process client and
	// local tools): always loopback.
	if clientURL, err = loopbackURL(a.cfg.Ports.EtcdClient); err != nil {
		return "", "", err
	}
	if !a.cfg.clustered() {
		peerURL, err = loopbackURL(a.cfg.Ports.EtcdPeer)
		return clientURL, peerURL, err
	}
	port := a.cfg.Ports.EtcdPeer
	if port == 0 {
		port = DefaultEtcdPeerPort
	}
	scheme := "http"
	if a.cfg.TLS.RPC {
		scheme = "https"
	}
	peerURL = (&url.URL{Scheme: scheme, Host: net.JoinHostPort(a.cfg.BindAddr, strconv.Itoa(port))}).String()
	return clientURL, peerURL, nil
}

// peerTLS secures the member's peer port with the agent's TLS files,
// admitting server certificates only (nil without tls.rpc).
func (a *Agent) peerTLS() *etcdembed.TLSFiles {
	tc := a.tlsConfig()
	if tc == nil || !a.cfg.clustered() {
		return nil
	}
	return &etcdembed.TLSFiles{CAFile: tc.CAFile, CertFile: tc.CertFile, KeyFile: tc.KeyFile,
		AllowedHostnames: []string{tc.ServerName()}}
}

// DefaultEtcdPeerPort is a clustered server's etcd peer port, as etcd's.
const DefaultEtcdPeerPort = 2380

// loopbackURL is http://127.0.0.1:port; port 0 picks a free port now (the
// embedded member needs a concrete URL to advertise).
func loopbackURL(port int) (string, error) {
	if port == 0 {
		var err error
		if port, err = pickLoopbackPort(); err != nil {
			return "", err
		}
	}
	return (&url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}).String(), nil
}

// pickLoopbackPort returns a loopback port free now (a variable for
// tests: another socket may take it before the member binds it).
var pickLoopbackPort = func() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("failed to pick a port for the embedded etcd member: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// etcdPorts are the embedded member's listener ports (none with an
// external cluster), reserved from jobs like the agent's own.
func (a *Agent) etcdPorts() []string {
	var out []string
	for _, u := range a.etcdURLs {
		if pu, err := url.Parse(u); err == nil {
			out = append(out, pu.Port())
		}
	}
	return out
}

// closeEtcd closes the external client or stops the embedded member (the
// store is closed before).
func (a *Agent) closeEtcd() error {
	var err error
	if a.etcdClient != nil {
		err = a.etcdClient.Close()
		a.etcdClient = nil
	}
	if a.etcdMember != nil {
		if cerr := a.etcdMember.Close(); cerr != nil {
			err = fmt.Errorf("failed to stop the embedded etcd member: %w", cerr)
		}
		a.etcdMember = nil
	}
	return err
}

// minFreeDisk is the free space the embedded member's disk must keep for
// the server to take writes: etcd stops the whole process when a write to
// its log or database fails, and its next log segment takes 8 MiB.
const minFreeDisk = 8 << 20

// memberDiskCheck refuses writes while the member's disk is nearly full,
// with an error that wraps ENOSPC (the API answers 507).
func memberDiskCheck(dir string) func() error {
	return func() error {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return nil // cannot tell: let etcd try
		}
		free := st.Bavail * uint64(st.Bsize)
		if free >= minFreeDisk {
			return nil
		}
		return fmt.Errorf("%w: %d MiB free under %s; the server's etcd member needs at least %d MiB",
			syscall.ENOSPC, free>>20, dir, minFreeDisk>>20)
	}
}
