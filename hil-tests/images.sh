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
# paper 003's microservice (hil netaware): its own program and discovery service address
# (the na testbed's host endpoint, 10.78.255.254:9098; env NA_CONTROL)
na_images=()
rest=()
for img in "${images[@]}"; do
  case "$img" in
    localhost/acoa/na-micro:*) na_images+=("$img") ;;
    *) rest+=("$img") ;;
  esac
done
images=("${rest[@]+"${rest[@]}"}")
if [ ${#na_images[@]} -gt 0 ]; then
  mkdir -p "$out/na-rootfs"
  rustc --edition 2021 -O -C panic=abort -C target-feature=+crt-static -C strip=symbols $target \
    "$here/src/bin/na-micro.rs" -o "$out/na-rootfs/na-micro"
  if ldd "$out/na-rootfs/na-micro" 2>&1 | grep -q '=>'; then
    echo "images.sh: na-micro is not static" >&2; exit 1
  fi
  tar -C "$out/na-rootfs" -cf "$out/na-micro.tar" na-micro
  for img in "${na_images[@]}"; do
    podman import --quiet \
      --change 'ENTRYPOINT ["/na-micro"]' \
      --change "ENV ACOA_CONTROL=${NA_CONTROL:-10.78.255.254:9098}" \
      "$out/na-micro.tar" "$img" >/dev/null
    echo "imported $img"
  done
fi
for img in "${images[@]+"${images[@]}"}"; do
  podman import --quiet \
    --change 'ENTRYPOINT ["/acoa-workload"]' \
    --change "ENV ACOA_CONTROL=$control" \
    "$out/workload.tar" "$img" >/dev/null
  echo "imported $img"
done
