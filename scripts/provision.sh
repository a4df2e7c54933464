#!/usr/bin/env bash
# Installs what meshlet needs on a Debian/Ubuntu host. One script for every
# place that sets a machine up: `make deps` (build and test dependencies)
# and the Vagrantfile (a full client VM with Envoy and a systemd unit).
#
#   scripts/provision.sh deps    Go modules, iptables, iproute2 (and the CI
#                                checkers shellcheck and ruby when CI=true)
#   scripts/provision.sh vm      everything a meshlet client VM needs: Go,
#                                iptables, CNI plugins in /opt/cni/bin,
#                                meshlet in /usr/local/bin, Envoy, systemd unit
#
# DRY_RUN=1 prints the commands instead of running them (CI checks it that way).
set -euo pipefail

GO_VERSION="${GO_VERSION:-1.26.8}"
SRC_DIR="${SRC_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
CNI_DIR="${CNI_DIR:-/opt/cni/bin}"
MESHLET_DATA_DIR="${MESHLET_DATA_DIR:-/var/lib/meshlet}"

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
	if [[ "${CI:-}" == true ]]; then
		have shellcheck || pkgs+=(shellcheck)
		have ruby || pkgs+=(ruby)
	fi
	if [[ ${#pkgs[@]} -gt 0 ]]; then
		apt_install "${pkgs[@]}"
	fi
	run go mod download
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

install_meshlet() {
	run make -C "$SRC_DIR" build cni
	run install -m 0755 "$SRC_DIR/bin/meshlet" /usr/local/bin/meshlet
	run install -d "$CNI_DIR"
	run cp "$SRC_DIR"/bin/cni/. "$CNI_DIR"/ -r
	write_file /etc/meshlet/agent.hcl 0644 <<CONF
# meshlet client agent (provisioned by scripts/provision.sh vm)
data_dir  = "${MESHLET_DATA_DIR}"
bind_addr = "0.0.0.0"
sidecar   = "auto"

client {
  cni_path = "${CNI_DIR}"
}
CONF
	write_file /etc/systemd/system/meshlet.service 0644 <<UNIT
[Unit]
Description=meshlet agent
Documentation=file://${SRC_DIR}/README.md
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=/usr/local/bin/meshlet agent -config /etc/meshlet/agent.hcl
KillMode=process
KillSignal=SIGINT
Restart=on-failure
RestartSec=2

[Install]
WantedBy=multi-user.target
UNIT
	run systemctl daemon-reload
	run systemctl enable --now meshlet.service
}

vm() {
	apt_install iptables iproute2 make git curl ca-certificates
	install_go
	export PATH="/usr/local/go/bin:$PATH"
	install_envoy
	install_meshlet
}

case "${1:-deps}" in
deps) deps ;;
vm) vm ;;
*)
	echo "usage: $0 deps|vm" >&2
	exit 2
	;;
esac
