#!/usr/bin/env bash
# The whole system on one machine: the control plane (embedded broker and store), one real
# agent per node of the railway testbed (targets/nodes/*.toml, all on loopback, sharing this
# machine's Podman), the workload images, and the two railway applications published.
#
#   ./demo.sh [--nodes n01,n13,...] [--data-dir DIR] [--port P] [--for SECONDS] [--debug] [--keep]
#
# --for SECONDS runs that long once everything is up, then stops cleanly (for tests); --debug
# builds and runs the debug binaries (quicker to build). Needs root (Podman's socket); runs
# .ci/setup first when its packages or the Podman service are missing. Ctrl-C stops everything
# and removes the containers it started (unless --keep). The control plane's log is the
# operator's window: it is shown here and kept in DIR/cloud.log; agents log to DIR/<node>/agent.log.
set -euo pipefail
root=$(cd "$(dirname "$0")" && pwd)
cd "$root"

nodes=$(ls targets/nodes/ | sed 's/\.toml$//' | paste -sd, -)
data=/tmp/acoa-demo
keep=0
port=18830
run_for=""
profile=release
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --data-dir) data=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --port) port=$2; shift 2 ;;
    --for) run_for=$2; shift 2 ;;
    --debug) profile=debug; shift ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "demo: unknown option $1" >&2; exit 2 ;;
  esac
done
case "$run_for" in ''|*[!0-9]*) [ -z "$run_for" ] || { echo "demo: --for takes whole seconds, not $run_for" >&2; exit 2; } ;; esac

# The first of .ci/setup's packages (its apt_install list) that is not installed.
missing_package() {
  local p
  for p in $(sed -n '/^apt_install /,/[^\\]$/p' .ci/setup | sed 's/^apt_install//; s/\\$//'); do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || { echo "$p"; return; }
  done
}
if [ "$(id -u)" -ne 0 ]; then
  pkg=$(missing_package)
  echo "demo: needs root (Podman's socket${pkg:+; .ci/setup installs $pkg and the rest}): run sudo .ci/setup once, then sudo ./demo.sh" >&2
  exit 1
fi
missing=$(missing_package)
[ -n "$missing" ] && missing="package $missing"
if ! curl -sf --unix-socket /run/podman/podman.sock http://d/v4.0.0/libpod/_ping >/dev/null 2>&1; then
  missing="${missing:-the Podman service}"
fi
if [ -n "$missing" ]; then
  echo "demo: running .ci/setup ($missing is missing)"
  .ci/setup
fi

if [ $profile = release ]; then
  echo "demo: building the control plane and the agent (release)"
  cargo build --release -q -p cloud-broker -p edge-agent
else
  echo "demo: building the control plane and the agent (debug)"
  cargo build -q -p cloud-broker -p edge-agent
fi
bin=${CARGO_TARGET_DIR:-$root/target}/$profile
echo "demo: importing the workload images"
hil-tests/images.sh >/dev/null

rm -rf "$data" && mkdir -p "$data"
apps=(scenarios/railway/smoke-monitoring.yaml scenarios/railway/speed-profiling.yaml)
pids=()
stopped=0
cleanup() {
  [ $stopped -eq 1 ] && return
  stopped=1
  set +e
  # The control plane first: agents that stop before it would be judged cut off.
  # The control plane and the agents in one signal each, the control plane first: it stops
  # before it hears the agents' last wills, and they stop before they see their broker go.
  [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null
  wait 2>/dev/null
  if [ $keep -eq 0 ]; then
    # only the demo's applications on the demo's nodes (other agents may share this Podman)
    for n in ${nodes//,/ }; do
      for app in "${apps[@]}"; do
        podman ps -aq --filter label=acoa.managed=true --filter "label=acoa.node=$n" \
          --filter "label=acoa.app=$(basename "$app" .yaml)" 2>/dev/null
      done
    done | sort -u | xargs -r podman rm -f >/dev/null 2>&1
  fi
  echo "demo: stopped (data in $data)"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cloud() { "$bin/cloud-broker" --data-dir "$data/cloud" "$@"; }
url="mqtt://127.0.0.1:$port"

# Every node is enrolled before the control plane starts, so it reads them all at its start
# and no agent logs in before its node is known.
i=0
for n in ${nodes//,/ }; do
  i=$((i + 1))
  dir="$data/$n"; mkdir -p "$dir"
  key=$("$bin/edge-agent" pubkey --state-dir "$dir" 2>/dev/null | tail -n 1)
  broker=$(cloud node add "$n" --public-key "$key" --broker-url "$url" 2>/dev/null)
  # The node's profile without its placeholder [broker] and [probe] tables and state_dir.
  {
    echo "state_dir = \"$dir\""
    awk '/^\[/{skip=($0=="[broker]"||$0=="[probe]")} !skip && !/^state_dir/' "targets/nodes/$n.toml"
    echo; echo "$broker"
    printf '\n[probe]\nlisten = "127.0.0.1:%d"\nperiod_ms = 1000\npeers_per_period = 4\n' $((17800 + i))
    # the workloads' traffic datagrams: a port per agent, reachable from Podman's bridge
    printf '\n[stats]\nlisten = "0.0.0.0:%d"\n' $((17900 + i))
  } > "$dir/agent.toml"
done

# The web view and the metrics, when this build has them.
serve_extra=()
web="" metrics=""
help=$(cloud serve --help)
if grep -q -- '--metrics-listen' <<<"$help"; then
  metrics="http://127.0.0.1:$((port + 1))/metrics"
  serve_extra+=(--metrics-listen "127.0.0.1:$((port + 1))")
fi
if grep -q -- '--http-listen' <<<"$help"; then
  token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  (umask 077; echo "$token" > "$data/http.token")
  web="http://127.0.0.1:$((port + 2))/?token=$token"
  serve_extra+=(--http-listen "127.0.0.1:$((port + 2))" --http-token-file "$data/http.token")
fi

"$bin/cloud-broker" --data-dir "$data/cloud" serve --listen "127.0.0.1:$port" "${serve_extra[@]}" \
  > "$data/cloud.log" 2>&1 &
pids+=($!)
tail -n +1 -f "$data/cloud.log" &
pids+=($!)
# Ready when the control plane's own client is connected to its broker.
waited=0
until grep -q "connected to the broker" "$data/cloud.log"; do
  if ! kill -0 "${pids[0]}" 2>/dev/null || [ $waited -ge 300 ]; then
    echo "demo: the control plane did not start (log in $data/cloud.log)" >&2
    exit 1
  fi
  sleep 0.1; waited=$((waited + 1))
done

for n in ${nodes//,/ }; do
  "$bin/edge-agent" --config "$data/$n/agent.toml" > "$data/$n/agent.log" 2>&1 &
  pids+=($!)
done
waited=0
until [ "$(grep -c "node .* joined" "$data/cloud.log")" -ge $i ] || [ $waited -ge 300 ]; do
  sleep 0.1; waited=$((waited + 1))
done
echo "demo: $i agents joined; waiting for their link metrics"
sleep 8

for app in "${apps[@]}"; do
  cloud apply --broker-url "$url" "$app" || true
done
sleep 2
cloud status --broker-url "$url" || true
[ -n "$metrics" ] && echo "demo: metrics at $metrics"
[ -n "$web" ] && echo "demo: web view at $web"
if [ -n "$run_for" ]; then
  echo "demo: running for $run_for s"
  sleep "$run_for"
  exit 0
fi
echo "demo: running; the control plane's log follows (Ctrl-C to stop)"
wait "${pids[0]}"
