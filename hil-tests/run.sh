#!/usr/bin/env bash
# The railway testbed in one command: builds the testbed (release), brings up the
# 20-node railway network (namespaces + user-space WAN emulator from scenarios/railway/cluster.yaml)
# for each experiment, runs it, tears everything down (also after a failure or Ctrl-C) and writes
# Markdown reports with PNG plots under hil-tests/results/<UTC time>/.
#
#   sudo hil-tests/run.sh                 # emulator bench, experiment 1 (reference prober), experiment 2
#   sudo hil-tests/run.sh --agents        # + experiment 1 with the real edge agents, experiment 2
#                                         # through the control plane and agents (`hil live`),
#                                         # experiments 3 and 4 (control plane, agents, Podman)
#   AGENT_RT=1 sudo hil-tests/run.sh --agents   # native agents SCHED_FIFO (not needed since the
#                                         # agents take kernel send and receive timestamps)
#   AGENT_BIN_AARCH64=/path/to/aarch64/edge-agent sudo hil-tests/run.sh --agents
#                                         # aarch64 nodes run the ARM build under qemu-aarch64-static
#                                         # (build it: ACOA_DIST=target-hil/dist cross/build.sh);
#                                         # experiment 1 then runs twice: native, and with qemu
# The agents measure one-way delays (`[probe] clock = "synchronized"`: the namespaces share the
# host's clock); CLOCK=free for half the round trip.
# Needs: root, /dev/net/tun, iproute2, fonts-dejavu-core (plot text); with --agents also
# mosquitto, podman + runc configured and its socket at /run/podman/podman.sock.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
agents=0
for a in "$@"; do
  case "$a" in
    --agents) agents=1 ;;
    *) echo "run.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target-hil}
# SKIP_BUILD=1: use the release binaries already in $CARGO_TARGET_DIR (a busy machine)
build() { if [ "${SKIP_BUILD:-0}" != 1 ]; then cargo build --release "$@"; fi; }
build -p hil-tests --bins
bin=$CARGO_TARGET_DIR/release
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${OUT:-hil-tests/results/$stamp}
mkdir -p "$out"

cleanup() {
  "$bin/hil" down --prefix hil- >/dev/null 2>&1 || true
  "$bin/hil" down --prefix hil-bench- >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM
cleanup

load0=$(cut -d' ' -f1-3 /proc/loadavg)
status=()
run() {
  local name=$1; shift
  echo "== $name"
  local l0; l0=$(cut -d' ' -f1 /proc/loadavg)
  if "$@" > "$out/$name.log" 2>&1; then
    status+=("| $name | ok | [report]($name/report.md) | $l0 / $(cut -d' ' -f1 /proc/loadavg) |")
  else
    status+=("| $name | FAILED (see $name.log) | | $l0 / $(cut -d' ' -f1 /proc/loadavg) |")
    echo "run.sh: $name failed, see $out/$name.log" >&2
  fi
  cleanup
}

run emulator "$bin/hil" emu-bench --out "$out/emulator"
run fidelity-reference "$bin/hil" fidelity --prober reference --out "$out/fidelity-reference"
if [ "$agents" = 1 ]; then
  build -p edge-agent -p cloud-broker
  common=(--clock "${CLOCK:-synchronized}")
  if [ "${AGENT_RT:-0}" = 1 ]; then common+=(--agent-rt); fi
  extra=("${common[@]}")
  if [ -n "${AGENT_BIN_AARCH64:-}" ]; then extra+=(--agent-bin-aarch64 "$AGENT_BIN_AARCH64"); fi
  run fidelity-agent "$bin/hil" fidelity --prober agent --agent-bin "$bin/edge-agent" \
    --duration-s "${AGENT_SECS:-100}" "${common[@]}" --out "$out/fidelity-agent"
  if [ -n "${AGENT_BIN_AARCH64:-}" ]; then
    run fidelity-agent-qemu "$bin/hil" fidelity --prober agent --agent-bin "$bin/edge-agent" \
      --duration-s "${AGENT_SECS:-100}" "${extra[@]}" --out "$out/fidelity-agent-qemu"
  fi
fi
run placement "$bin/hil" placement --out "$out/placement"
if [ "$agents" = 1 ]; then
  # workload images (static acoa-workload) for the containers the agents run
  OUT="$CARGO_TARGET_DIR/workload" "$root/hil-tests/images.sh" >/dev/null
  run live "$bin/hil" live --cloud-bin "$bin/cloud-broker" --agent-bin "$bin/edge-agent" \
    --random "${RANDOM_DRAWS:-20}" "${extra[@]}" --out "$out/live"
  run dynamic "$bin/hil" dynamic --cloud-bin "$bin/cloud-broker" --agent-bin "$bin/edge-agent" \
    "${extra[@]}" --out "$out/dynamic"
fi

{
  echo "# Railway testbed run $stamp"
  echo
  echo "Host: $(uname -srm), $(nproc) cores; commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')."
  echo "Load average at the start: $load0; at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo "| experiment | result | report | load average (1 min) before / after |"
  echo "|---|---|---|---|"
  printf '%s\n' "${status[@]}"
} > "$out/README.md"
cat "$out/README.md"
echo "run.sh: results in $out"
