#!/usr/bin/env bash
# Installs what meshlet needs on a Debian/Ubuntu host. Shared by `make deps`
# and the Vagrantfile.
#
#   scripts/provision.sh deps    build and test dependencies (Go modules, iptables, iproute2)
#
# Set DRY_RUN=1 to print the commands instead of running them.
set -euo pipefail

run() {
	if [[ "${DRY_RUN:-0}" == 1 ]]; then
		echo "+ $*"
	else
		"$@"
	fi
}

have() { command -v "$1" >/dev/null 2>&1; }

apt_install() {
	local missing=()
	for pkg in "$@"; do
		dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
	done
	[[ ${#missing[@]} -eq 0 ]] && return 0
	if ! have apt-get; then
		echo "provision: please install: ${missing[*]} (no apt-get on this host)" >&2
		return 1
	fi
	if [[ $(id -u) -ne 0 ]]; then
		echo "provision: missing packages ${missing[*]}; run as root or: sudo apt-get install -y ${missing[*]}" >&2
		return 1
	fi
	run apt-get update -qq
	run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
}

deps() {
	local pkgs=()
	have iptables || pkgs+=(iptables)
	have ip || pkgs+=(iproute2)
	if [[ ${#pkgs[@]} -gt 0 ]]; then
		apt_install "${pkgs[@]}"
	fi
	run go mod download
}

case "${1:-deps}" in
deps) deps ;;
*)
	echo "usage: $0 deps" >&2
	exit 2
	;;
esac
