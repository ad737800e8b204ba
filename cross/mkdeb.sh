#!/usr/bin/env bash
# Packs a built edge-agent into a .deb (dpkg-deb only, no network):
#   cross/mkdeb.sh --target aarch64|armv7|x86_64 --bin PATH [--out DIR] [--version V]
# Contents: /usr/bin/edge-agent, /etc/acoa/agent.toml (conffile), /lib/systemd/system/acoa-agent.service,
# /usr/share/acoa-agent/profiles/*.toml (railway role profiles), /usr/share/doc/acoa-agent/.
# Usually called by cross/build.sh --deb.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target=aarch64
bin=
out="$ROOT/target-cross/dist"
version=
while [ $# -gt 0 ]; do
    case "$1" in
        --target) target="$2"; shift 2 ;;
        --bin) bin="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --version) version="$2"; shift 2 ;;
        *) echo "mkdeb.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "$bin" ] && [ -x "$bin" ] || { echo "mkdeb.sh: --bin PATH to a built edge-agent is required" >&2; exit 2; }
# shellcheck source=../targets/aarch64.env
. "$ROOT/targets/$target.env"
if [ -z "$version" ]; then
    v="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -n 1)"
    version="${v:-0.0.0}-1"
fi

pkg=acoa-agent
stage="$out/pkg-$DEB_ARCH"
rm -rf "$stage"
install -d "$stage/DEBIAN"
install -D -m 0755 "$bin" "$stage/usr/bin/edge-agent"
install -D -m 0644 "$ROOT/cross/deb/agent.toml" "$stage/etc/acoa/agent.toml"
install -D -m 0644 "$ROOT/cross/deb/acoa-agent.service" "$stage/lib/systemd/system/acoa-agent.service"
install -d "$stage/usr/share/$pkg/profiles"
install -m 0644 "$ROOT"/targets/profiles/*.toml "$stage/usr/share/$pkg/profiles/"
install -D -m 0644 "$ROOT/cross/README.md" "$stage/usr/share/doc/$pkg/README.md"
cat > "$stage/usr/share/doc/$pkg/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: acoa
Files: *
License: Apache-2.0
 On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0.
EOF
for s in postinst prerm postrm; do install -m 0755 "$ROOT/cross/deb/$s" "$stage/DEBIAN/$s"; done
echo /etc/acoa/agent.toml > "$stage/DEBIAN/conffiles"

# Depends from what the binary links: libc6 at the highest GLIBC symbol version it uses
glibc="$(readelf -V "$bin" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)"
deps="libc6 (>= ${glibc:-2.31})"
if readelf -d "$bin" | grep -q 'libgcc_s.so'; then deps="$deps, libgcc-s1"; fi
size_kb="$(du -sk --exclude=DEBIAN "$stage" | cut -f1)"
cat > "$stage/DEBIAN/control" <<EOF
Package: $pkg
Version: $version
Architecture: $DEB_ARCH
Maintainer: ACOA team <acoa@localhost>
Installed-Size: $size_kb
Depends: $deps
Recommends: podman, runc
Suggests: mosquitto-clients
Section: admin
Priority: optional
Description: ACOA edge agent for cloud, train and station nodes
 Reports the node's resources and the measured latency, jitter and loss to
 its peers over MQTT to the ACOA control plane, and runs the containers the
 control plane places on the node through Podman (or k3s).
 .
 Edit /etc/acoa/agent.toml, register the node's public key with the control
 plane, and start acoa-agent.service.
EOF
mkdir -p "$out"
deb="$out/${pkg}_${version}_${DEB_ARCH}.deb"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "mkdeb.sh: $deb ($(stat -c %s "$deb") bytes; $DEB_ARCH, $deps)" >&2
echo "$deb"
