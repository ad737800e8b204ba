#!/usr/bin/env bash
# Paper 003 reproduced in the testbed in one command: builds the testbed, the control
# plane and the agent, imports the na-micro image, brings up cp + w1..w5 (namespaces na-*,
# 10.78.0.0/16, the user-space WAN emulator), starts the real control plane and five real agents,
# and for each latency (10, 100, 200 ms one way between any two nodes) deploys the m0-m12/db1-db4
# workflow with the network-unaware baseline and with the network-aware placement, runs the load
# steps from cp, then changes latencies while it runs and records the descheduler's moves. Tears
# everything down (also after a failure or Ctrl-C) and writes report.md, CSV and PNG plots under
# hil-tests/results/netaware-<UTC time>/.
#
#   sudo hil-tests/run-netaware.sh                 # through the control plane, agents, Podman
#   sudo hil-tests/run-netaware.sh --processes     # components as processes (no Podman)
#   sudo hil-tests/run-netaware.sh --latencies 10 --users 10 --step-s 10 --no-dynamic
#                                                  # any `hil netaware` option (see --help)
#   sudo hil-tests/run-netaware.sh --scheds cp:network-aware --dyn-sched cp:network-aware \
#        --deschedule-ms 2000 --agent-capacity 20000,65536
#                                                  # placed and descheduled by the control plane
#                                                  # itself from what the agents measure
# Env: PROFILE=debug (default release), CARGO_TARGET_DIR (default target-hil), OUT (report dir).
# Needs: root, /dev/net/tun, iproute2, fonts-dejavu-core (plot text); without --processes also
# podman + runc configured and its socket at /run/podman/podman.sock.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target-hil}
profile=${PROFILE:-release}
flag=--release
if [ "$profile" = debug ]; then flag=""; fi
processes=0
for a in "$@"; do [ "$a" = --processes ] && processes=1; done
cargo build $flag -p hil-tests --bins
bin=$CARGO_TARGET_DIR/$profile
if [ "$processes" = 0 ]; then
  cargo build $flag -p cloud-broker -p edge-agent
  OUT="$CARGO_TARGET_DIR/workload" "$root/hil-tests/images.sh" localhost/acoa/na-micro:1 >/dev/null
fi
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${OUT:-hil-tests/results/netaware-$stamp}
mkdir -p "$out"

cleanup() {
  "$bin/hil" down --prefix na- >/dev/null 2>&1 || true
  # only this testbed's containers: nodes w1..w5, applications na-*
  for n in w1 w2 w3 w4 w5; do
    podman ps -aq --filter label=acoa.managed=true --filter "label=acoa.node=$n" \
      --format '{{.ID}} {{.Labels}}' 2>/dev/null | grep 'acoa.app:na-' | cut -d' ' -f1 |
      xargs -r podman rm -f -t 0 >/dev/null 2>&1 || true
  done
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM
cleanup

"$bin/hil" netaware --cloud-bin "$bin/cloud-broker" --agent-bin "$bin/edge-agent" \
  --micro-bin "$bin/na-micro" --out "$out" "$@" 2>&1 | tee "$out/run.log"
echo "run-netaware.sh: results in $out"
