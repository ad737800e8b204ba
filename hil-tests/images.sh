#!/usr/bin/env bash
# Builds the workload program (acoa-workload) as a static binary and imports it into Podman as
# local images, one per component image the scenarios name (no registry is reachable here):
#   localhost/acoa/<name>:<tag>  with ENTRYPOINT /acoa-workload and ACOA_CONTROL set to the
#   testbed collector (the emulator's host endpoint, 10.77.255.254:9099).
# Usage: hil-tests/images.sh [IMAGE...]   (default: every localhost/acoa/ image in scenarios/)
# Env: OUT (build dir), ACOA_CONTROL (collector address baked into the images).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${OUT:-$root/target-hil/workload}
control=${ACOA_CONTROL:-10.77.255.254:9099}
mkdir -p "$out/rootfs"

# std only: plain rustc, no cargo dependencies to build. musl where rustup has it, else a
# statically linked glibc build (the program resolves no host names).
target=""
if rustup target list --installed 2>/dev/null | grep -q '^x86_64-unknown-linux-musl$'; then
  target="--target x86_64-unknown-linux-musl"
fi
rustc --edition 2021 -O -C panic=abort -C target-feature=+crt-static -C strip=symbols $target \
  "$here/src/bin/acoa-workload.rs" -o "$out/rootfs/acoa-workload"
if ldd "$out/rootfs/acoa-workload" 2>&1 | grep -q '=>'; then
  echo "images.sh: acoa-workload is not static" >&2; exit 1
fi
ls -l "$out/rootfs/acoa-workload"
tar -C "$out/rootfs" -cf "$out/workload.tar" acoa-workload

if [ $# -gt 0 ]; then
  images=("$@")
else
  mapfile -t images < <(grep -rhoE 'localhost/acoa/[A-Za-z0-9._/-]+:[A-Za-z0-9._-]+' "$root/scenarios" | sort -u)
fi
for img in "${images[@]}"; do
  podman import --quiet \
    --change 'ENTRYPOINT ["/acoa-workload"]' \
    --change "ENV ACOA_CONTROL=$control" \
    "$out/workload.tar" "$img" >/dev/null
  echo "imported $img"
done
