#!/usr/bin/env bash
# Installs what meshlet needs on a Debian/Ubuntu host. One script for every
# place that sets a machine up: `make deps` (build and test dependencies)
# and the Vagrantfile (cluster VMs with Envoy and a systemd unit).
#
#   scripts/provision.sh deps [test]
#                                Go modules, iptables, iproute2; with `test`
#                                also docker.io and busybox-static (the docker
#                                driver's tests run a private dockerd; the
#                                package's own daemon is not started), and the
#                                CI checkers shellcheck and ruby when CI=true
#   scripts/provision.sh vm      a standalone VM: Go, iptables, CNI plugins in
#                                /opt/cni/bin, meshlet in /usr/local/bin, Envoy,
#                                and one agent with both roles (no cluster)
#   scripts/provision.sh server|client|both NAME IP SERVER_IPS
#                                the same software, and an agent that is one
#                                member of a cluster: NAME is its node name, IP
#                                the address it binds, SERVER_IPS the servers'
#                                addresses, comma-separated (the first is the
#                                one the others join); `both` is a server that
#                                also runs the client role
#
# A cluster member makes its own certificate (meshlet tls cert create) from
# the agent CA in $MESHLET_CA_DIR (meshlet-agent-ca.pem and
# meshlet-agent-ca-key.pem, which the Vagrantfile uploads); it keeps the CA
# certificate and removes its copy of the CA key. Members run with ACLs and
# with TLS on the RPC port and both HTTP APIs; the last server bootstraps
# the ACL system with the secret in $MESHLET_CA_DIR/management-token, which
# every member keeps root-only in /etc/meshlet for the CLI.
#
# DRY_RUN=1 prints the commands and the files instead of running and writing
# them (CI checks it that way).
set -euo pipefail

GO_VERSION="${GO_VERSION:-1.26.8}"
SRC_DIR="${SRC_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
CNI_DIR="${CNI_DIR:-/opt/cni/bin}"
MESHLET_DATA_DIR="${MESHLET_DATA_DIR:-/var/lib/meshlet}"
CONF_DIR="${CONF_DIR:-/etc/meshlet}"
# Where the VM builds meshlet: not $SRC_DIR/bin, which the host and the
# other VMs share.
BUILD_DIR="${BUILD_DIR:-/var/lib/meshlet-build}"
MESHLET_CA_DIR="${MESHLET_CA_DIR:-/tmp/meshlet-ca}"
MESHLET_BIN="${MESHLET_BIN:-/usr/local/bin/meshlet}"
RPC_PORT=4647
CA_CERT=meshlet-agent-ca.pem
CA_KEY=meshlet-agent-ca-key.pem
# The cluster's management token's secret, chosen by the Vagrantfile: the
# last server bootstraps the ACL system with it (meshlet acl bootstrap FILE).
MGMT_TOKEN=management-token

run() {
	if [[ "${DRY_RUN:-0}" == 1 ]]; then
		echo "+ $*"
	else
		"$@"
	fi
}

# write_file PATH MODE: writes stdin to PATH (printed instead under DRY_RUN).
write_file() {
	local path="$1" mode="$2"
	if [[ "${DRY_RUN:-0}" == 1 ]]; then
		echo "+ write $path (mode $mode):"
		sed 's/^/    /'
		return 0
	fi
	install -d "$(dirname "$path")"
	cat >"$path"
	chmod "$mode" "$path"
}

die() {
	echo "provision: $*" >&2
	exit 1
}

have() { command -v "$1" >/dev/null 2>&1; }

apt_install() {
	local missing=() pkg
	for pkg in "$@"; do
		dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
	done
	[[ ${#missing[@]} -eq 0 ]] && return 0
	if ! have apt-get; then
		echo "provision: please install: ${missing[*]} (no apt-get on this host)" >&2
		return 1
	fi
	if [[ $(id -u) -ne 0 && "${DRY_RUN:-0}" != 1 ]]; then
		echo "provision: missing packages ${missing[*]}; run as root or: sudo apt-get install -y ${missing[*]}" >&2
		return 1
	fi
	run apt-get update -qq
	run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
}

deps() {
	if ! have go; then
		install_go
		export PATH="/usr/local/go/bin:$PATH"
	fi
	local pkgs=()
	have iptables || pkgs+=(iptables)
	have ip || pkgs+=(iproute2)
	have gcc || pkgs+=(gcc) # cgo, which the race detector needs
	if [[ "${1:-}" == test ]]; then
		# The docker driver's tests run a private dockerd on a busybox
		# image built from the host's static busybox (driver/docker/dockertest).
		have dockerd || pkgs+=(docker.io)
		pkgs+=(busybox-static) # apt_install skips it when installed
	fi
	if [[ "${CI:-}" == true ]]; then
		have shellcheck || pkgs+=(shellcheck)
		have ruby || pkgs+=(ruby)
	fi
	if [[ ${#pkgs[@]} -gt 0 ]]; then
		without_service_start apt_install "${pkgs[@]}"
	fi
	run go mod download
}

# without_service_start runs a command (an install) while Debian's
# invoke-rc.d policy refuses to start services: installing docker.io must
# not start the system's dockerd, which would rewrite the host's iptables
# (FORWARD policy DROP) under the CNI tests. An existing policy is kept.
without_service_start() {
	local policy=/usr/sbin/policy-rc.d
	if [[ -e $policy || "${DRY_RUN:-0}" == 1 || $(id -u) -ne 0 ]]; then
		"$@"
		return
	fi
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 0755 "$policy"
	local rc=0
	"$@" || rc=$?
	rm -f "$policy"
	return "$rc"
}

install_go() {
	if have go && [[ "$(go env GOVERSION 2>/dev/null)" == "go${GO_VERSION}" ]]; then
		return 0
	fi
	local arch tarball
	arch="$(dpkg --print-architecture 2>/dev/null || echo amd64)"
	tarball="go${GO_VERSION}.linux-${arch}.tar.gz"
	run curl -fsSLo "/tmp/${tarball}" "https://go.dev/dl/${tarball}"
	run rm -rf /usr/local/go
	run tar -C /usr/local -xzf "/tmp/${tarball}"
	run ln -sf /usr/local/go/bin/go /usr/local/bin/go
}

install_envoy() {
	have envoy && return 0
	local codename
	# shellcheck source=/dev/null
	codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")"
	apt_install ca-certificates curl gpg
	run install -d -m 0755 /etc/apt/keyrings
	if [[ "${DRY_RUN:-0}" == 1 ]]; then
		echo "+ curl -fsSL https://apt.envoyproxy.io/signing.key | gpg --dearmor -o /etc/apt/keyrings/envoy-keyring.gpg"
	else
		curl -fsSL https://apt.envoyproxy.io/signing.key | gpg --dearmor --yes -o /etc/apt/keyrings/envoy-keyring.gpg
	fi
	write_file /etc/apt/sources.list.d/envoy.list 0644 <<LIST
deb [signed-by=/etc/apt/keyrings/envoy-keyring.gpg] https://apt.envoyproxy.io ${codename} main
LIST
	run apt-get update -qq
	run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq envoy
}

# install_software: everything but the agent's configuration.
install_software() {
	apt_install iptables iproute2 make git curl ca-certificates
	install_go
	export PATH="/usr/local/go/bin:$PATH"
	install_envoy
	run make -C "$SRC_DIR" build cni BIN="$BUILD_DIR"
	run install -m 0755 "$BUILD_DIR/meshlet" "$MESHLET_BIN"
	run install -d "$CNI_DIR"
	run cp "$BUILD_DIR"/cni/. "$CNI_DIR"/ -r
}

# install_unit writes the systemd unit and (re)starts the agent, so a new
# configuration or certificate takes effect on every provisioning run.
install_unit() {
	write_file /etc/systemd/system/meshlet.service 0644 <<UNIT
[Unit]
Description=meshlet agent
Documentation=file://${SRC_DIR}/docs/operations.md
After=network-online.target
Wants=network-online.target
# Keep trying while the private network or the servers are not up yet.
StartLimitIntervalSec=0

[Service]
ExecStart=${MESHLET_BIN} agent -config ${CONF_DIR}/agent.hcl
KillMode=process
KillSignal=SIGINT
ExecReload=/bin/kill -HUP \$MAINPID
Restart=on-failure
RestartSec=2

[Install]
WantedBy=multi-user.target
UNIT
	run systemctl daemon-reload
	run systemctl enable meshlet.service
	run systemctl restart meshlet.service
}

vm() {
	install_software
	write_file "$CONF_DIR/agent.hcl" 0644 <<CONF
# meshlet agent with both roles (provisioned by scripts/provision.sh vm)
data_dir  = "${MESHLET_DATA_DIR}"
bind_addr = "0.0.0.0"
sidecar   = "auto"

client {
  cni_path = "${CNI_DIR}"
}

# The jobspecs' app tasks use raw_exec, which (as in Nomad) is off unless
# enabled here; their connect sidecars run on connect_proxy, always enabled.
plugin "raw_exec" {
  config {
    enabled = true
  }
}
CONF
	install_unit
}

valid_ipv4() {
	local IFS=. octet
	[[ "$1" =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]] || return 1
	for octet in $1; do
		((10#$octet <= 255)) || return 1
	done
}

# check_member_args ROLE NAME IP SERVER_IPS: the arguments of a cluster
# member, checked before anything is installed.
check_member_args() {
	local role="$1" name="$2" ip="$3" servers="$4" s found=0 server_ips
	[[ "$name" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || die "node name '$name': use letters, digits, '.', '-' and '_'"
	valid_ipv4 "$ip" || die "'$ip' is not an IPv4 address"
	[[ -n "$servers" ]] || die "SERVER_IPS is empty"
	IFS=, read -ra server_ips <<<"$servers"
	for s in "${server_ips[@]}"; do
		valid_ipv4 "$s" || die "server address '$s' in '$servers' is not an IPv4 address"
		[[ "$s" == "$ip" ]] && found=1
	done
	if [[ "$role" != client && $found -eq 0 ]]; then
		die "a $role's IP ($ip) must be one of SERVER_IPS ($servers)"
	fi
	if [[ "$role" == client && $found -eq 1 ]]; then
		die "a client's IP ($ip) must not be one of SERVER_IPS ($servers)"
	fi
}

# rpc_addrs IP...: the addresses as an HCL list of IP:4647.
rpc_addrs() {
	local out="" ip
	for ip in "$@"; do
		out+="${out:+, }\"${ip}:${RPC_PORT}\""
	done
	echo "[${out}]"
}

# agent_config ROLE NAME IP SERVER_IPS prints a cluster member's agent.hcl
# (the shape of docs/operations.md, "Running a cluster").
agent_config() {
	local role="$1" name="$2" ip="$3" server_ips cert_role=server label
	IFS=, read -ra server_ips <<<"$4"
	[[ "$role" == client ]] && cert_role=client
	local cert="global-${cert_role}-meshlet-${name}"
	label="$role"
	[[ "$role" == both ]] && label="server and client"
	cat <<CONF
# meshlet ${label} agent ${name} (provisioned by scripts/provision.sh)
data_dir  = "${MESHLET_DATA_DIR}"
bind_addr = "${ip}"
node_name = "${name}"
CONF
	[[ "$role" != server ]] && echo 'sidecar   = "auto"'
	echo
	if [[ "$role" == client ]]; then
		printf 'server {\n  enabled = false\n}\n'
	else
		printf 'server {\n  enabled          = true\n  bootstrap_expect = %d\n' "${#server_ips[@]}"
		if [[ "$ip" != "${server_ips[0]}" ]]; then
			printf '  server_join {\n    retry_join = %s\n  }\n' "$(rpc_addrs "${server_ips[0]}")"
		fi
		echo "}"
	fi
	echo
	case "$role" in
	server) printf 'client {\n  enabled = false\n}\n' ;;
	client) printf 'client {\n  enabled  = true\n  servers  = %s\n  cni_path = "%s"\n}\n' "$(rpc_addrs "${server_ips[@]}")" "$CNI_DIR" ;;
	both) printf 'client {\n  enabled  = true\n  cni_path = "%s"\n}\n' "$CNI_DIR" ;;
	esac
	# The jobspecs' app tasks use raw_exec, which (as in Nomad) is off unless
	# enabled; their sidecars run on connect_proxy, always enabled.
	[[ "$role" != server ]] && printf '\nplugin "raw_exec" {\n  config {\n    enabled = true\n  }\n}\n'
	cat <<CONF

acl {
  enabled = true
}

tls {
  rpc                    = true
  http                   = true
  ca_file                = "${CONF_DIR}/${CA_CERT}"
  cert_file              = "${CONF_DIR}/${cert}.pem"
  key_file               = "${CONF_DIR}/${cert}-key.pem"
  verify_server_hostname = true
}
CONF
}

# check_agent_config FILE ROLE: the keys a member's configuration needs, and
# balanced braces (no parser here; the agent reports anything else with
# file:line:col when it starts).
check_agent_config() {
	local file="$1" role="$2" key opens closes
	local keys=(data_dir bind_addr node_name 'server {' 'client {' enabled 'acl {' 'tls {' 'rpc ' 'http ' ca_file cert_file key_file verify_server_hostname)
	[[ "$role" == client ]] && keys+=(servers)
	[[ "$role" != server ]] && keys+=(cni_path)
	for key in "${keys[@]}"; do
		grep -q "^ *${key}" "$file" || die "$file: no '${key}' (role $role)"
	done
	opens=$(tr -cd '{' <"$file" | wc -c)
	closes=$(tr -cd '}' <"$file" | wc -c)
	((opens == closes)) || die "$file: $opens '{' but $closes '}'"
}

# make_node_cert ROLE NAME IP: the member's RPC certificate, signed by the CA
# in $MESHLET_CA_DIR, made afresh on every run in a scratch directory and
# then moved next to the CA certificate in $CONF_DIR.
make_node_cert() {
	local role="$1" name="$2" ip="$3" flag=-server
	[[ "$role" == client ]] && flag=-client
	local ca="$MESHLET_CA_DIR/$CA_CERT" key="$MESHLET_CA_DIR/$CA_KEY"
	local scratch="$CONF_DIR/.new-cert"
	run rm -rf "$scratch"
	run install -d -m 0700 "$scratch"
	run env -C "$scratch" "$MESHLET_BIN" tls cert create "$flag" -node "$name" \
		-additional-ipaddress "$ip" -ca "$ca" -key "$key"
	run install -m 0644 "$ca" "$CONF_DIR/$CA_CERT"
	run find "$scratch" -maxdepth 1 -name '*.pem' -exec mv -f {} "$CONF_DIR"/ ';'
	run rm -rf "$scratch"
	# Only the host keeps the CA key.
	run rm -f "$key"
}

# require_ca NAME: the CA files make_node_cert needs, checked before the
# long installation.
require_ca() {
	[[ "${DRY_RUN:-0}" == 1 ]] && return 0
	[[ -f "$MESHLET_CA_DIR/$CA_CERT" && -f "$MESHLET_CA_DIR/$CA_KEY" ]] ||
		die "no agent CA in $MESHLET_CA_DIR ($CA_CERT and $CA_KEY): the Vagrantfile uploads them (run 'vagrant provision $1'); elsewhere create one with 'meshlet tls ca create' and set MESHLET_CA_DIR"
	[[ -f "$MESHLET_CA_DIR/$MGMT_TOKEN" ]] ||
		die "no $MGMT_TOKEN in $MESHLET_CA_DIR: the Vagrantfile uploads it (run 'vagrant provision $1'); elsewhere put a new UUID there (uuidgen)"
}

# member ROLE NAME IP SERVER_IPS provisions one member of a cluster.
member() {
	[[ $# -eq 4 ]] || usage
	local role="$1" name="$2" ip="$3" servers="$4" server_ips
	check_member_args "$role" "$name" "$ip" "$servers"
	local conf
	conf="$(mktemp)"
	# shellcheck disable=SC2064 # expand now: conf is local
	trap "rm -f '$conf'" EXIT
	agent_config "$role" "$name" "$ip" "$servers" >"$conf"
	check_agent_config "$conf" "$role"
	require_ca "$name"
	install_software
	run install -d -m 0755 "$CONF_DIR"
	make_node_cert "$role" "$name" "$ip"
	write_file "$CONF_DIR/agent.hcl" 0644 <"$conf"
	run install -m 0600 "$MESHLET_CA_DIR/$MGMT_TOKEN" "$CONF_DIR/$MGMT_TOKEN"
	run rm -f "$MESHLET_CA_DIR/$MGMT_TOKEN"
	# The CLI in the VM talks to this agent over HTTPS: its HTTP API listens
	# on $ip, its connect API on loopback. root (sudo -i) also gets the
	# management token.
	write_file /etc/profile.d/meshlet.sh 0644 <<ENV
export MESHLET_ADDR=https://${ip}:4646
export MESHLET_CONNECT_ADDR=https://127.0.0.1:8500
export MESHLET_CACERT=${CONF_DIR}/${CA_CERT}
if [ -r ${CONF_DIR}/${MGMT_TOKEN} ]; then
	MESHLET_TOKEN="\$(cat ${CONF_DIR}/${MGMT_TOKEN})"
	export MESHLET_TOKEN
fi
ENV
	install_unit
	IFS=, read -ra server_ips <<<"$servers"
	if [[ "$ip" == "${server_ips[-1]}" ]]; then
		bootstrap_acl "$ip"
	fi
}

# bootstrap_acl IP: the last server provisioned makes the management token
# with the chosen secret once the cluster answers (every server is up by
# then); a cluster that was bootstrapped before is fine.
bootstrap_acl() {
	local ip="$1" out tries=0
	local -a cmd=(env "MESHLET_ADDR=https://${ip}:4646" "MESHLET_CACERT=${CONF_DIR}/${CA_CERT}"
		"$MESHLET_BIN" acl bootstrap "$CONF_DIR/$MGMT_TOKEN")
	if [[ "${DRY_RUN:-0}" == 1 ]]; then
		run "${cmd[@]}"
		return 0
	fi
	while ((tries++ < 60)); do
		if out="$("${cmd[@]}" 2>&1 >/dev/null)"; then
			echo "provision: ACL system bootstrapped (the management token is in $CONF_DIR/$MGMT_TOKEN)"
			return 0
		fi
		if [[ "$out" == *"bootstrap already done"* ]]; then
			return 0
		fi
		sleep 2
	done
	echo "provision: WARNING: ACL bootstrap failed ($out); run 'sudo -i meshlet acl bootstrap $CONF_DIR/$MGMT_TOKEN' on $ip" >&2
}

usage() {
	echo "usage: $0 deps [test] | vm | server|client|both NAME IP SERVER_IPS" >&2
	exit 2
}

# Sourcing the script (tests) defines the functions only.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
	case "${1:-deps}" in
	deps) deps "${@:2}" ;;
	vm) vm ;;
	server | client | both) member "$@" ;;
	*) usage ;;
	esac
fi
