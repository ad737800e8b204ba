#!/usr/bin/env bash
# Renders one agent configuration per node of a cluster file from the role profiles:
#   cross/render-nodes.sh [--cluster FILE] [--out DIR] [--set KEY=VALUE]...
# Defaults: scenarios/railway/cluster.yaml -> targets/nodes/NODE.toml. --set is passed to every
# node (e.g. --set broker.url=mqtt://10.0.0.1:1883); the role comes from the node's labels
# (acoa-wire render).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cluster="$CROSS_ROOT/scenarios/railway/cluster.yaml"
out="$CROSS_ROOT/targets/nodes"
sets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --cluster) cluster="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --set) sets+=(--set "$2"); shift 2 ;;
        *) echo "render-nodes.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
wire="$(acoa_wire)"
mkdir -p "$out"
nodes="$(sed -n 's/^- name: \(.*\)$/\1/p' "$cluster")"
for n in $nodes; do
    "$wire" render --cluster "$cluster" --profiles "$CROSS_ROOT/targets/profiles" --node "$n" \
        ${sets[@]+"${sets[@]}"} > "$out/$n.toml"
done
echo "render-nodes.sh: $(echo $nodes | wc -w) configurations in $out" >&2
