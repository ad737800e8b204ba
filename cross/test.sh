#!/usr/bin/env bash
# All cross/ checks (called by the project's test.sh after cargo test): the aarch64 agent under
# qemu against a real Mosquitto, then both packages and the node profiles. Non-zero on failure.
# Last line: "cross: N passed, M failed" over both scripts.
set -uo pipefail
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log="$(mktemp /tmp/acoa-cross-test.XXXXXX)"
rc=0
bash "$dir/test-qemu.sh" 2>&1 | tee -a "$log" || rc=1
bash "$dir/test-deb.sh" 2>&1 | tee -a "$log" || rc=1
p=0; f=0
while read -r _ _ np _ nf _; do p=$((p + np)); f=$((f + nf)); done \
    < <(grep -E '^cross (qemu|deb): [0-9]+ passed, [0-9]+ failed' "$log")
rm -f "$log"
echo "cross: $p passed, $f failed"
[ "$rc" = 0 ] && [ "$f" = 0 ]
