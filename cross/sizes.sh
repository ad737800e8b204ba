#!/usr/bin/env bash
# Prints the stripped sizes of the built agents and packages (BENCHMARKS.md "## Binary sizes"):
#   cross/build.sh --target aarch64 --deb && cross/build.sh --target x86_64 --deb && cross/sizes.sh
# Goal: under 4 MB (4,000,000 bytes) per agent binary.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIST="${ACOA_DIST:-$ROOT/target-cross/dist}"
printf '%-9s %-10s %12s %9s  %-6s %s\n' target deb-arch bytes MiB goal "stripped / .deb"
for t in aarch64 armv7 x86_64; do
    b="$DIST/$t/edge-agent"
    [ -x "$b" ] || continue
    deb_arch="$(. "$ROOT/targets/$t.env"; echo "$DEB_ARCH")"
    s=$(stat -c %s "$b")
    stripped=no; readelf -S "$b" | grep -q '\.symtab' || stripped=yes
    deb="$(ls -t "$DIST"/acoa-agent_*_"$deb_arch".deb 2>/dev/null | head -n 1 || true)"
    dsz=-; [ -n "$deb" ] && dsz="$(stat -c %s "$deb")"
    goal=ok; [ "$s" -lt 4000000 ] || goal=OVER
    printf '%-9s %-10s %12s %9.2f  %-6s %s / %s bytes\n' "$t" "$deb_arch" "$s" "$(awk -v s="$s" 'BEGIN { print s / 1048576 }')" "$goal" "$stripped" "$dsz"
done
