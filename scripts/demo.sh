#!/usr/bin/env bash
# make demo / make demo-stop: a dev agent in the background running the
# two-group connect demo (jobspecs/countdash.hcl). Safe to re-run.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT="$(pwd)"
BIN="$ROOT/bin/meshlet"
DEMO_DIR="$ROOT/.demo"
PID_FILE="$DEMO_DIR/agent.pid"
LOG="$DEMO_DIR/agent.log"
JOB="$ROOT/jobspecs/countdash.hcl"
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
		say "Stopping the demo agent"
		kill -INT "$(cat "$PID_FILE")" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do agent_running || break; sleep 0.2; done
		if agent_running; then kill -KILL "$(cat "$PID_FILE")" 2>/dev/null || true; fi
	fi
	rm -f "$PID_FILE"
	say "Demo stopped"
}

start() {
	if [[ $(id -u) -ne 0 ]]; then
		echo "demo: needs root (network namespaces, CNI, iptables): sudo make demo" >&2
		exit 1
	fi
	mkdir -p "$DEMO_DIR"
	if agent_running; then
		say "A demo agent is already running (pid $(cat "$PID_FILE")); restarting the demo"
		stop
	fi
	if "$BIN" node status >/dev/null 2>&1; then
		# e.g. the systemd agent of a Vagrant VM: use it, leave it running.
		say "Using the meshlet agent already answering on $MESHLET_ADDR"
		"$BIN" job stop -purge countdash >/dev/null 2>&1 || true
	else
		say "Starting a dev agent (data in $DEMO_DIR/data, log in $LOG)"
		nohup "$BIN" agent -dev -data-dir "$DEMO_DIR/data" >"$LOG" 2>&1 &
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
  $BIN alloc exec -task dashboard <alloc-id> $BIN demo-app get http://127.0.0.2:19001/clusters

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
