#!/usr/bin/env bash
# make demo / make demo-stop: a dev agent in the background running the
# two-group connect demo (jobspecs/countdash.hcl). Safe to re-run.
#
# DRIVER=docker (make demo DRIVER=docker) runs the container variant
# (jobspecs/countdash-docker.hcl) on an image built here from the static
# demo app, imported into the dockerd answering on /var/run/docker.sock or,
# when none does, into a private one this script starts (data under
# .demo/docker, --iptables=false --bridge=none) and demo-stop stops.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT="$(pwd)"
BIN="$ROOT/bin/meshlet"
DEMO_DIR="$ROOT/.demo"
PID_FILE="$DEMO_DIR/agent.pid"
LOG="$DEMO_DIR/agent.log"
JOB="$ROOT/jobspecs/countdash.hcl"
DRIVER="${DRIVER:-}"
DOCKER_DIR="$DEMO_DIR/docker"
DOCKERD_PID="$DEMO_DIR/dockerd.pid"
DOCKERD_LOG="$DEMO_DIR/dockerd.log"
SYSTEM_DOCKER="unix:///var/run/docker.sock"
DEMO_IMAGE="meshlet/demo-app:local"
DASHBOARD="http://127.0.0.1:9002/"
export MESHLET_ADDR="http://127.0.0.1:4646"
export MESHLET_CONNECT_ADDR="http://127.0.0.1:8500"

say() { printf '==> %s\n' "$*"; }

agent_running() {
	[[ -f "$PID_FILE" ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
	local secs="$1" what="$2"
	shift 2
	for ((i = 0; i < secs * 5; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.2
	done
	echo "demo: timed out after ${secs}s waiting for $what; agent log: $LOG" >&2
	tail -n 30 "$LOG" >&2 || true
	return 1
}

stop() {
	"$BIN" job stop -purge countdash >/dev/null 2>&1 || true
	if agent_running; then
		# Give the purge time to stop the containers before the agent goes.
		if dockerd_running; then sleep 3; fi
		say "Stopping the demo agent"
		kill -INT "$(cat "$PID_FILE")" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do agent_running || break; sleep 0.2; done
		if agent_running; then kill -KILL "$(cat "$PID_FILE")" 2>/dev/null || true; fi
	fi
	rm -f "$PID_FILE"
	stop_dockerd
	say "Demo stopped"
}

dockerd_running() {
	[[ -f "$DOCKERD_PID" ]] && kill -0 "$(cat "$DOCKERD_PID")" 2>/dev/null
}

# stop_dockerd stops the private dockerd start_dockerd started (its
# containers with it), detaches what it left mounted and removes its data.
stop_dockerd() {
	if dockerd_running; then
		say "Stopping the demo's private dockerd"
		kill -TERM "$(cat "$DOCKERD_PID")" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do dockerd_running || break; sleep 0.2; done
		if dockerd_running; then kill -KILL "$(cat "$DOCKERD_PID")" 2>/dev/null || true; sleep 1; fi
	fi
	rm -f "$DOCKERD_PID"
	if [[ -d "$DOCKER_DIR" ]]; then
		awk -v d="$DOCKER_DIR" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | sort -r |
			while read -r m; do umount -l "$m" 2>/dev/null || true; done
		rm -rf "$DOCKER_DIR"
	fi
}

# start_dockerd sets DOCKER_ENDPOINT: the system's dockerd when it answers,
# else a private one (started here unless already running).
start_dockerd() {
	if ! command -v docker >/dev/null; then
		echo "demo: DRIVER=docker needs the docker CLI and dockerd: make test-deps (docker.io)" >&2
		exit 1
	fi
	if docker -H "$SYSTEM_DOCKER" version >/dev/null 2>&1; then
		DOCKER_ENDPOINT="$SYSTEM_DOCKER"
		say "Using the dockerd answering on $SYSTEM_DOCKER"
		return
	fi
	DOCKER_ENDPOINT="unix://$DOCKER_DIR/docker.sock"
	if dockerd_running; then return; fi
	if ! command -v dockerd >/dev/null; then
		echo "demo: no dockerd answers on $SYSTEM_DOCKER and none is installed: make test-deps (docker.io)" >&2
		exit 1
	fi
	say "Starting a private dockerd (data in $DOCKER_DIR, log in $DOCKERD_LOG; no iptables, no bridge)"
	mkdir -p "$DOCKER_DIR"
	nohup dockerd --data-root "$DOCKER_DIR/root" --exec-root "$DOCKER_DIR/exec" -H "$DOCKER_ENDPOINT" \
		--pidfile "$DOCKER_DIR/dockerd.pid" --iptables=false --ip6tables=false --bridge=none >"$DOCKERD_LOG" 2>&1 &
	echo $! >"$DOCKERD_PID"
	LOG="$DOCKERD_LOG" wait_for 60 "dockerd" docker -H "$DOCKER_ENDPOINT" version
}

# build_image imports the demo image: FROM scratch, its only file the
# static demo app, its entrypoint. Nothing is pulled.
build_image() {
	say "Building $DEMO_IMAGE (the static demo app, FROM scratch)"
	mkdir -p "$DEMO_DIR/image"
	CGO_ENABLED=0 "${GO:-go}" build -o "$DEMO_DIR/image/demo-app" ./demoapp/cmd/demo-app
	tar -C "$DEMO_DIR/image" --owner=0 --group=0 -cf - demo-app |
		docker -H "$DOCKER_ENDPOINT" import --change 'ENTRYPOINT ["/demo-app"]' - "$DEMO_IMAGE" >/dev/null
}

start() {
	if [[ $(id -u) -ne 0 ]]; then
		echo "demo: needs root (network namespaces, CNI, iptables): sudo make demo" >&2
		exit 1
	fi
	mkdir -p "$DEMO_DIR"
	local agent_args=()
	case "$DRIVER" in
	"") ;;
	docker) JOB="$ROOT/jobspecs/countdash-docker.hcl" ;;
	*)
		echo "demo: DRIVER must be docker or unset, not \"$DRIVER\"" >&2
		exit 2
		;;
	esac
	if agent_running; then
		say "A demo agent is already running (pid $(cat "$PID_FILE")); restarting the demo"
		stop
	fi
	local exec_cmd="$BIN demo-app"
	if [[ "$DRIVER" == docker ]]; then
		start_dockerd
		build_image
		# -dev with a config file: the file's settings plus dev mode.
		printf 'data_dir  = "%s"\nlog_level = "debug"\nplugin "docker" {\n  config {\n    endpoint = "%s"\n  }\n}\n' \
			"$DEMO_DIR/data" "$DOCKER_ENDPOINT" >"$DEMO_DIR/docker.hcl"
		agent_args=(-config "$DEMO_DIR/docker.hcl")
		exec_cmd="/demo-app"
	fi
	if "$BIN" node status >/dev/null 2>&1; then
		# e.g. the systemd agent of a Vagrant VM: use it, leave it running.
		say "Using the meshlet agent already answering on $MESHLET_ADDR"
		if [[ "$DRIVER" == docker && "$DOCKER_ENDPOINT" != "$SYSTEM_DOCKER" ]]; then
			say "Note: that agent's docker driver must use $DOCKER_ENDPOINT (plugin \"docker\" { config { endpoint } })"
		fi
		"$BIN" job stop -purge countdash >/dev/null 2>&1 || true
	else
		say "Starting a dev agent (data in $DEMO_DIR/data, log in $LOG)"
		nohup "$BIN" agent -dev "${agent_args[@]}" -data-dir "$DEMO_DIR/data" >"$LOG" 2>&1 &
		echo $! >"$PID_FILE"
		wait_for 30 "the agent's API" "$BIN" node status
	fi
	say "Running $JOB"
	"$BIN" job run "$JOB"
	say "Waiting until the dashboard reads the counter through the mesh"
	wait_for 60 "traffic through the mesh" bash -c "curl -fsS '$DASHBOARD' 2>/dev/null | grep -q 'Count:' || '$BIN' demo-app get '$DASHBOARD' | grep -q 'Count:'"
	cat <<MSG

meshlet is running the connect demo:
  - count-api   (group "api") is reachable only through the mesh;
  - count-dashboard (group "dashboard") is published on ${DASHBOARD}
    and reads the counter through its sidecar's upstream 127.0.0.1:8080,
    which is mTLS to count-api's sidecar and authorized by intentions.

See traffic flow through the mesh (the count goes up on every request):
  $BIN demo-app get ${DASHBOARD}api        # or: curl ${DASHBOARD}api

Inspect it:
  $BIN job status countdash
  $BIN alloc status <alloc-id>                       # addresses, ports, tasks, events
  $BIN alloc exec -task dashboard <alloc-id> $exec_cmd get http://127.0.0.2:19001/clusters

Deny, then allow, the dashboard's calls to the api:
  $BIN intention create -deny count-dashboard count-api    # the dashboard now answers 502
  $BIN intention delete count-dashboard count-api          # and the count comes back

Stop it:  make demo-stop
MSG
}

case "${1:-start}" in
start) start ;;
stop) stop ;;
*)
	echo "usage: $0 start|stop" >&2
	exit 2
	;;
esac
