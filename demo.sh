#!/usr/bin/env bash
# The whole system on one machine: the control plane (embedded broker and store), one real
# agent per node of the railway testbed (targets/nodes/*.toml, all on loopback, sharing this
# machine's Podman), the workload images, and the two railway applications published.
#
#   ./demo.sh [--nodes n01,n13,...] [--data-dir DIR] [--keep]
#
# Needs root (Podman's socket), .ci/setup run once. Ctrl-C stops everything and removes the
# containers it started (unless --keep). The control plane's log is the operator's window:
# it is shown here and kept in DIR/cloud.log; agents log to DIR/<node>/agent.log.
set -euo pipefail
root=$(cd "$(dirname "$0")" && pwd)
cd "$root"

nodes=$(ls targets/nodes/ | sed 's/\.toml$//' | paste -sd, -)
data=/tmp/acoa-demo
keep=0
port=18830
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --data-dir) data=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --port) port=$2; shift 2 ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
    *) echo "demo: unknown option $1" >&2; exit 2 ;;
  esac
done

echo "demo: building the control plane and the agent (release)"
cargo build --release -q -p cloud-broker -p edge-agent
bin=${CARGO_TARGET_DIR:-$root/target}/release
echo "demo: importing the workload images"
hil-tests/images.sh >/dev/null

rm -rf "$data" && mkdir -p "$data"
pids=()
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [ $keep -eq 0 ]; then
    for n in ${nodes//,/ }; do
      podman ps -aq --filter label=acoa.managed=true --filter "label=acoa.node=$n" 2>/dev/null
    done | sort -u | xargs -r podman rm -f >/dev/null 2>&1
  fi
  echo "demo: stopped (data in $data)"
}
trap cleanup EXIT INT TERM

cloud() { "$bin/cloud-broker" --data-dir "$data/cloud" "$@"; }
cloud serve --listen "127.0.0.1:$port" > "$data/cloud.log" 2>&1 &
pids+=($!)
tail -n +1 -f "$data/cloud.log" &
pids+=($!)
for _ in $(seq 1 50); do (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.2; done

i=0
for n in ${nodes//,/ }; do
  i=$((i + 1))
  dir="$data/$n"; mkdir -p "$dir"
  key=$("$bin/edge-agent" pubkey --state-dir "$dir" 2>/dev/null | tail -n 1)
  broker=$(cloud node add "$n" --public-key "$key" 2>/dev/null)
  # The node's profile without its placeholder [broker] and [probe] tables and state_dir.
  {
    echo "state_dir = \"$dir\""
    awk '/^\[/{skip=($0=="[broker]"||$0=="[probe]")} !skip && !/^state_dir/' "targets/nodes/$n.toml"
    echo; echo "$broker"
    printf '\n[probe]\nlisten = "127.0.0.1:%d"\nperiod_ms = 1000\npeers_per_period = 4\n' $((17800 + i))
  } > "$dir/agent.toml"
  "$bin/edge-agent" --config "$dir/agent.toml" > "$dir/agent.log" 2>&1 &
  pids+=($!)
done
echo "demo: $i agents started; waiting for their first reports and link metrics"
sleep 8

for app in scenarios/railway/smoke-monitoring.yaml scenarios/railway/speed-profiling.yaml; do
  cloud apply --broker-url "mqtt://127.0.0.1:$port" "$app" || true
done
sleep 10
cloud status --broker-url "mqtt://127.0.0.1:$port" || true
echo "demo: running; the control plane's log follows (Ctrl-C to stop)"
wait "${pids[0]}"
