//go:build tools

package tools

import (
	_ "github.com/containernetworking/cni/libcni"
	_ "github.com/containernetworking/plugins/pkg/ns"
	_ "github.com/containernetworking/plugins/pkg/testutils"
	_ "github.com/coreos/go-iptables/iptables"
	_ "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	_ "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	_ "github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	_ "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	_ "github.com/hashicorp/consul/api"
	_ "github.com/hashicorp/go-hclog"
	_ "github.com/hashicorp/go-plugin"
	_ "github.com/hashicorp/hcl/v2/hclsyntax"
	_ "github.com/hashicorp/hcl/v2/gohcl"
	_ "github.com/hashicorp/nomad/api"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/vishvananda/netlink"
	_ "go.etcd.io/bbolt"
	_ "github.com/google/uuid"
	_ "google.golang.org/grpc/xds"
	_ "github.com/zclconf/go-cty/cty/gocty"
	_ "golang.org/x/sys/unix"
)

