#!/usr/bin/env bash
# Footprint benchmark of the edge agent (not a timed test: it prints figures).
#
# Builds the agent in the `edge` profile, runs it reporting every second and probing
# 20 peers (tiny UDP echo responders on loopback, all 20 probed every second) against
# a Mosquitto of its own, with the Podman socket if one is there (listed every second),
# and measures over DURATION seconds:
#   - peak RSS (VmHWM of /proc/PID/status),
#   - CPU share of one core (utime+stime from /proc/PID/stat),
#   - the stripped binary size.
# With CONTAINERS=N (and the Podman socket and the image localhost/acoa/test-sleeper:1,
# which the Podman tests build), the agent also runs N managed containers meanwhile.
# Usage: edge-agent/bench/footprint.sh   (env: DURATION=60 PEERS=20 CONTAINERS=0 CARGO_TARGET_DIR=...)
# Needs: mosquitto, mosquitto-clients.
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${DURATION:-60}
PEERS=${PEERS:-20}
CONTAINERS=${CONTAINERS:-0}
IMAGE=localhost/acoa/test-sleeper:1
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
cargo build -q --profile edge -p edge-agent
cargo build -q --profile edge -p edge-agent --example bench_peers
BIN=$CARGO_TARGET_DIR/edge/edge-agent
HELPER=$CARGO_TARGET_DIR/edge/examples/bench_peers

WORK=$(mktemp -d /tmp/acoa-footprint.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
  if [ "$CONTAINERS" -gt 0 ]; then podman rm -f -t 0 $(podman ps -aq --filter label=acoa.node=bench) >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 10000)); }
MQTT_PORT=$(free_port)
BASE_PORT=$((30000 + RANDOM % 20000))

printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence false\n' "$MQTT_PORT" > "$WORK/mosquitto.conf"
mosquitto -c "$WORK/mosquitto.conf" 2>"$WORK/mosquitto.log" & PIDS+=($!)
"$HELPER" "$PEERS" "$BASE_PORT" "$WORK" "$CONTAINERS" "$IMAGE" & PIDS+=($!)
for _ in $(seq 50); do [ -s "$WORK/cp.pub" ] && break; sleep 0.1; done

SOCKET=unix:///run/podman/podman.sock
[ -S /run/podman/podman.sock ] || SOCKET=unix://$WORK/no-podman.sock
cat > "$WORK/agent.toml" <<CONF
node = "bench"
datacenter = "bench"
state_dir = "$WORK/state"
report_period_ms = 1000
image_allowlist = ["localhost/acoa/"]
[broker]
url = "mqtt://127.0.0.1:$MQTT_PORT"
control_plane_key = "$(cat "$WORK/cp.pub")"
[probe]
listen = "127.0.0.1:$((BASE_PORT + PEERS))"
peers_per_period = $PEERS
period_ms = 1000
window = 20
[podman]
socket = "$SOCKET"
CONF
"$BIN" --config "$WORK/agent.toml" 2>"$WORK/agent.log" & AGENT=$!; PIDS+=($AGENT)
sleep 2
mosquitto_pub -p "$MQTT_PORT" -q 1 -r -t acoa/v1/nodes/bench/peers -f "$WORK/peers.bin"
sleep 3
grep -q "peers to probe" "$WORK/agent.log" || { echo "the agent did not take the peer list:"; cat "$WORK/agent.log"; exit 1; }
if [ "$CONTAINERS" -gt 0 ]; then
  mosquitto_pub -p "$MQTT_PORT" -q 1 -r -t acoa/v1/nodes/bench/desired -f "$WORK/desired.bin"
  for _ in $(seq 60); do
    [ "$(podman ps -q --filter label=acoa.node=bench | wc -l)" -ge "$CONTAINERS" ] && break; sleep 1
  done
  echo "managed containers running: $(podman ps -q --filter label=acoa.node=bench | wc -l)"
fi

TCK=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$AGENT/stat"; }
T0=$(ticks); S0=$(date +%s.%N)
LINKS=$(timeout "$DURATION" mosquitto_sub -p "$MQTT_PORT" -t acoa/v1/nodes/bench/links -F '%l' 2>/dev/null | wc -l || true)
T1=$(ticks); S1=$(date +%s.%N)
HWM_KB=$(awk '/VmHWM/ {print $2}' "/proc/$AGENT/status")
RSS_KB=$(awk '/VmRSS/ {print $2}' "/proc/$AGENT/status")
SIZE=$(stat -c %s "$BIN")
CPU=$(awk -v t0="$T0" -v t1="$T1" -v s0="$S0" -v s1="$S1" -v tck="$TCK" 'BEGIN { printf "%.2f", (t1 - t0) / tck / (s1 - s0) * 100 }')
echo "machine: $(uname -m), $(nproc) cores, $(awk '/model name/ {$1=$2=$3=""; print; exit}' /proc/cpuinfo | sed 's/^ *//'), kernel $(uname -r)"
echo "podman socket: $SOCKET"
echo "window: ${DURATION} s, ${PEERS} peers probed every second, reports every second, ${CONTAINERS} managed containers"
echo "link-metrics messages seen: $LINKS"
echo "peak RSS (VmHWM): $((HWM_KB / 1024)).$(( (HWM_KB % 1024) * 10 / 1024 )) MiB ($HWM_KB kB), RSS at end $RSS_KB kB"
echo "CPU: $CPU % of one core"
echo "binary (stripped, profile edge): $SIZE bytes ($(awk -v s="$SIZE" 'BEGIN { printf "%.2f", s / 1048576 }') MiB)"
