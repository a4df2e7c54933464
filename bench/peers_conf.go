package bench

import (
	"fmt"
	"path/filepath"
	"strings"
)

// peerLayout is where one peer pair listens and forwards. The client side
// runs in the client allocation's namespace and listens on its 127.0.0.1;
// the server side runs in the server allocation's namespace, listens on
// its address (ServerIP) and forwards to the apps on its 127.0.0.1.
type peerLayout struct {
	Dir      string // working directory: one sub-directory per side
	Certs    peerCerts
	ServerIP string
	// Client side listeners (127.0.0.1): HTTP (L7, keep-alive), Conn (L4,
	// one TLS connection per client connection), Bulk (L4, iperf3).
	HTTP, Conn, Bulk int
	// Server side listeners (ServerIP), the same three services.
	SrvHTTP, SrvConn, SrvBulk int
	// The apps on the server namespace's 127.0.0.1: HTTP serves both the
	// HTTP and the Conn service; Bulk is an iperf3 server.
	AppHTTP, AppBulk int
	// StreamModule is nginx's ngx_stream_module.so ("" = built in).
	StreamModule string
}

// sideDir is one side's working directory.
func (l peerLayout) sideDir(side string) string { return filepath.Join(l.Dir, side) }

// The TLS both peers use on the mesh leg: TLS 1.3 only, AES-128-GCM, the
// client certificate verified by the server side and the server's by the
// client side, no session resumption (each new connection is a full
// handshake, like the built-in proxy's).
const peerCipher = "TLS_AES_128_GCM_SHA256"

// nginxConf renders one side's nginx.conf: one process (master_process
// off: the master only forks and supervises, and one process is what the
// sidecar is), an http block for the HTTP service and a stream block for
// the two L4 services.
func nginxConf(l peerLayout, side string) string {
	dir := l.sideDir(side)
	var b strings.Builder
	if l.StreamModule != "" {
		fmt.Fprintf(&b, "load_module %s;\n", l.StreamModule)
	}
	fmt.Fprintf(&b, `daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
`, dir)
	if side == "client" {
		nginxClientBlocks(&b, l)
	} else {
		nginxServerBlocks(&b, l)
	}
	return b.String()
}

func nginxClientBlocks(b *strings.Builder, l peerLayout) {
	tls := func(prefix string) string {
		return fmt.Sprintf(`    %[1]s_ssl_certificate %[2]s;
    %[1]s_ssl_certificate_key %[3]s;
    %[1]s_ssl_trusted_certificate %[4]s;
    %[1]s_ssl_verify on;
    %[1]s_ssl_name %[5]s;
    %[1]s_ssl_server_name on;
    %[1]s_ssl_protocols TLSv1.3;
    %[1]s_ssl_conf_command Ciphersuites %[6]s;
    %[1]s_ssl_session_reuse off;
`, prefix, l.Certs.ClientCert, l.Certs.ClientKey, l.Certs.CA, peerServerName, peerCipher)
	}
	fmt.Fprintf(b, `  upstream mesh {
    server %s:%d;
    keepalive 64;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
  }
  server {
    listen 127.0.0.1:%d;
    location / {
      proxy_pass https://mesh;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
%s    }
  }
}
stream {
`, l.ServerIP, l.SrvHTTP, l.HTTP, tls("proxy"))
	for _, p := range [][2]int{{l.Conn, l.SrvConn}, {l.Bulk, l.SrvBulk}} {
		fmt.Fprintf(b, "  server {\n    listen 127.0.0.1:%d;\n    proxy_pass %s:%d;\n    proxy_ssl on;\n%s  }\n",
			p[0], l.ServerIP, p[1], tls("proxy"))
	}
	b.WriteString("}\n")
}

func nginxServerBlocks(b *strings.Builder, l peerLayout) {
	tls := fmt.Sprintf(`    ssl_certificate %s;
    ssl_certificate_key %s;
    ssl_client_certificate %s;
    ssl_verify_client on;
    ssl_protocols TLSv1.3;
    ssl_conf_command Ciphersuites %s;
    ssl_session_tickets off;
    ssl_session_cache off;
`, l.Certs.ServerCert, l.Certs.ServerKey, l.Certs.CA, peerCipher)
	fmt.Fprintf(b, `  upstream app {
    server 127.0.0.1:%d;
    keepalive 64;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
  }
  server {
    listen %s:%d ssl;
%s    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
stream {
`, l.AppHTTP, l.ServerIP, l.SrvHTTP, tls)
	for _, p := range [][2]int{{l.SrvConn, l.AppHTTP}, {l.SrvBulk, l.AppBulk}} {
		fmt.Fprintf(b, "  server {\n    listen %s:%d ssl;\n%s    proxy_pass 127.0.0.1:%d;\n  }\n", l.ServerIP, p[0], tls, p[1])
	}
	b.WriteString("}\n")
}

// haproxyConf renders one side's haproxy.cfg: one process with one thread
// (nbthread 1), HTTP mode with keep-alive and connection reuse for the
// HTTP service, TCP mode for the two L4 services.
func haproxyConf(l peerLayout, side string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
  nbthread 1
  maxconn 8192
  pidfile %s/haproxy.pid
  tune.ssl.default-dh-param 2048
defaults
  timeout connect 5s
  timeout client 300s
  timeout server 300s
  timeout http-keep-alive 300s
  option http-keep-alive
  http-reuse always
`, l.sideDir(side))
	if side == "client" {
		srv := fmt.Sprintf("ssl crt %s ca-file %s verify required verifyhost %s sni str(%s) ssl-min-ver TLSv1.3 ssl-max-ver TLSv1.3 ciphersuites %s no-ssl-reuse",
			l.Certs.ClientBundle, l.Certs.CA, peerServerName, peerServerName, peerCipher)
		haproxyService(&b, "http", "http", fmt.Sprintf("127.0.0.1:%d", l.HTTP), fmt.Sprintf("%s:%d %s", l.ServerIP, l.SrvHTTP, srv))
		haproxyService(&b, "conn", "tcp", fmt.Sprintf("127.0.0.1:%d", l.Conn), fmt.Sprintf("%s:%d %s", l.ServerIP, l.SrvConn, srv))
		haproxyService(&b, "bulk", "tcp", fmt.Sprintf("127.0.0.1:%d", l.Bulk), fmt.Sprintf("%s:%d %s", l.ServerIP, l.SrvBulk, srv))
		return b.String()
	}
	bind := fmt.Sprintf("ssl crt %s ca-file %s verify required ssl-min-ver TLSv1.3 ssl-max-ver TLSv1.3 ciphersuites %s no-tls-tickets",
		l.Certs.ServerBundle, l.Certs.CA, peerCipher)
	haproxyService(&b, "http", "http", fmt.Sprintf("%s:%d %s", l.ServerIP, l.SrvHTTP, bind), fmt.Sprintf("127.0.0.1:%d", l.AppHTTP))
	haproxyService(&b, "conn", "tcp", fmt.Sprintf("%s:%d %s", l.ServerIP, l.SrvConn, bind), fmt.Sprintf("127.0.0.1:%d", l.AppHTTP))
	haproxyService(&b, "bulk", "tcp", fmt.Sprintf("%s:%d %s", l.ServerIP, l.SrvBulk, bind), fmt.Sprintf("127.0.0.1:%d", l.AppBulk))
	return b.String()
}

// haproxyService is a frontend bound to bind and its backend's one server.
func haproxyService(b *strings.Builder, name, mode, bind, server string) {
	fmt.Fprintf(b, "frontend %[1]s\n  mode %[2]s\n  bind %[3]s\n  default_backend %[1]s_be\nbackend %[1]s_be\n  mode %[2]s\n  server s1 %[4]s\n",
		name, mode, bind, server)
}
