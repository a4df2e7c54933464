#!/usr/bin/env bash
# Runs meshlet's benchmarks and writes bench/RESULTS.md and
# bench/results.json (`make bench` runs it after `make deps all`, so
# bin/meshlet and bin/cni/* exist). Needs root: the data-plane and
# lifecycle areas run the real agent (namespaces, CNI, iptables).
#
# It installs the load generators first: iperf3 from Debian, fortio from
# the Go module proxy into bin/fortio; and the data plane's peer proxies,
# Debian's nginx, libnginx-mod-stream and haproxy, with provision.sh's
# apt_install under without_service_start (their system services are not
# started: the bench runs its own instances in its namespaces). Extra
# arguments go to benchrun, e.g.
#   scripts/bench.sh -areas controlplane
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
FORTIO_VERSION="${FORTIO_VERSION:-v1.63.0}"
GO="${GO:-go}"
cd "$ROOT"
# shellcheck source=/dev/null # (scripts/provision.sh, checked on its own)
source "$ROOT/scripts/provision.sh" # defines apt_install, without_service_start

if [[ $(id -u) -ne 0 ]]; then
	echo "bench: run as root (the benchmarks create network namespaces and run the agent): sudo make bench" >&2
	exit 1
fi
for f in bin/meshlet bin/cni/bridge; do
	if [[ ! -x $f ]]; then
		echo "bench: $f is missing; run 'make all' first" >&2
		exit 1
	fi
done

# Only the data-plane, gateway and cluster-mesh areas use the load
# generators: a run limited by -areas to others installs neither.
AREAS=all
prev=""
for a in "$@"; do
	case "$prev" in -areas | --areas) AREAS="$a" ;; esac
	case "$a" in -areas=* | --areas=*) AREAS="${a#*=}" ;; esac
	prev="$a"
done
if [[ $AREAS == all || ,$AREAS, == *,dataplane,* || ,$AREAS, == *,gateway,* || ,$AREAS, == *,clustermesh,* ]]; then
	without_service_start apt_install iperf3
	if [[ ! -x bin/fortio ]]; then
		echo "bench: installing fortio $FORTIO_VERSION into bin/"
		GOBIN="$ROOT/bin" "$GO" install "fortio.org/fortio@$FORTIO_VERSION"
	fi
fi
if [[ $AREAS == all || ,$AREAS, == *,dataplane,* ]]; then
	without_service_start apt_install nginx libnginx-mod-stream haproxy
	# perf counts the proxies' system calls per request; the area reports
	# the rest without it.
	without_service_start apt_install linux-perf || echo "bench: linux-perf not installed: no system-call counts"
fi
FORTIO=()
if [[ -x bin/fortio ]]; then
	FORTIO=(-fortio "$ROOT/bin/fortio")
fi

"$GO" build -o bin/benchrun ./bench/cmd/benchrun
exec bin/benchrun -repo "$ROOT" -go "$GO" "${FORTIO[@]}" "$@"
