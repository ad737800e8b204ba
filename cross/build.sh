#!/usr/bin/env bash
# Builds the ACOA edge agent for an edge box, and optionally its .deb.
#
#   cross/build.sh [--target aarch64|armv7|x86_64] [--deb] [--no-install] [--route rustup|cross|debian]
#
# Default target: aarch64 (aarch64-unknown-linux-gnu). Profile: the workspace's `edge` profile
# (opt-level z, fat LTO, one codegen unit, panic=abort, stripped).
#
# Routes, first that the machine has (or forced with --route / ACOA_CROSS_ROUTE):
#   rustup  the rustup toolchain already has the target's standard library (`rustup target add`)
#   cross   the `cross` tool is on PATH (cross-rs, needs a container engine with its images)
#   debian  Debian's rustc-web (/usr/bin/rustc) with the target's libstd-rust-web-dev and the GNU
#           cross linker; installed with apt-get when missing (root)
# x86_64 is the host: built with the default toolchain, no route needed.
#
# Output: $ACOA_DIST (default target-cross/dist)/<target>/edge-agent, and with --deb
#         $ACOA_DIST/acoa-agent_<version>_<debarch>.deb (cross/mkdeb.sh).
# Environment: ACOA_TARGET_CPU / ACOA_FEATURES (override TARGET_CPU / FEATURES of targets/<t>.env),
#              ACOA_DIST (output directory), ACOA_CROSS_TARGET_DIR
#              (cargo target dir of the cross build, default target-aarch64 / target-armv7),
#              CARGO_TARGET_DIR (host build, default target-cross).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

target=aarch64
want_deb=0
install=1
route="${ACOA_CROSS_ROUTE:-}"
while [ $# -gt 0 ]; do
    case "$1" in
        --target) target="${2:?--target needs a value}"; shift 2 ;;
        --target=*) target="${1#--target=}"; shift ;;
        --deb) want_deb=1; shift ;;
        --no-install) install=0; shift ;;
        --route) route="${2:?--route needs a value}"; shift 2 ;;
        --route=*) route="${1#--route=}"; shift ;;
        -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

case "$target" in
    aarch64|arm64|aarch64-unknown-linux-gnu) target=aarch64 ;;
    armv7|armhf|armv7-unknown-linux-gnueabihf) target=armv7 ;;
    x86_64|amd64|x86_64-unknown-linux-gnu) target=x86_64 ;;
    *) echo "build.sh: unknown target $target (aarch64, armv7 or x86_64)" >&2; exit 2 ;;
esac

# shellcheck source=../targets/aarch64.env
. "$ROOT/targets/$target.env"
cpu="${ACOA_TARGET_CPU:-$TARGET_CPU}"
DIST="${ACOA_DIST:-$ROOT/target-cross/dist}"
say() { echo "build.sh: $*" >&2; }
die() { echo "build.sh: error: $*" >&2; exit 1; }

host_triple="$(rustc -vV 2>/dev/null | sed -n 's/^host: //p' || true)"
[ -n "$host_triple" ] || host_triple=x86_64-unknown-linux-gnu

FEATURES="${ACOA_FEATURES:-${FEATURES:-}}"
# The packaged agent: the default features but `cluster-check` (check-config --cluster reads
# cluster files with a YAML parser the node never needs), plus the target's own.
features_args=(--no-default-features --features "tls${FEATURES:+ $FEATURES}")

apt_install() {
    # apt_install PKG...: installs what is missing (root only).
    [ "$install" = 1 ] || die "missing packages: $* (run without --no-install, as root, to install them)"
    [ "$(id -u)" = 0 ] || die "missing packages: $* (run as root to install them, or install by hand)"
    local arch
    for p in "$@"; do
        case "$p" in *:*) arch="${p##*:}"
            if [ "$arch" != "$(dpkg --print-architecture)" ] && ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
                say "adding dpkg architecture $arch"
                dpkg --add-architecture "$arch"
            fi ;;
        esac
    done
    say "apt-get update"
    # a partial index failure (a mirror mid-sync) must not stop us: the install below tells.
    apt-get update -q >/dev/null 2>&1 || say "apt-get update reported errors; trying the install anyway"
    say "apt-get install -y $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
}

missing_pkgs() {
    local out=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || out+=("$p")
    done
    echo "${out[@]:-}"
}

build_host() {
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target-cross}"
    local flags=""
    [ -n "$cpu" ] && flags="-C target-cpu=$cpu"
    say "route: host ($host_triple, $(rustc -V)), profile edge, target dir $CARGO_TARGET_DIR"
    RUSTFLAGS="${RUSTFLAGS:-} $flags" cargo build -p edge-agent --profile edge "${features_args[@]}"
    out_bin="$CARGO_TARGET_DIR/edge/edge-agent"
}

build_cross() {
    local tdir="${ACOA_CROSS_TARGET_DIR:-$ROOT/target-$target}"
    local envt
    envt="$(echo "$RUST_TARGET" | tr 'a-z-' 'A-Z_')"
    local flags=""
    [ -n "$cpu" ] && flags="-C target-cpu=$cpu"
    export CC_"${RUST_TARGET//-/_}"="$CC" AR_"${RUST_TARGET//-/_}"="$AR"
    export CARGO_TARGET_"$envt"_LINKER="$LINKER"
    if [ -n "$flags" ]; then export CARGO_TARGET_"$envt"_RUSTFLAGS="$flags"; fi

    if [ -z "$route" ]; then
        if command -v rustup >/dev/null 2>&1 && rustup target list --installed 2>/dev/null | grep -qx "$RUST_TARGET"; then
            route=rustup
        elif command -v cross >/dev/null 2>&1; then
            route=cross
        else
            route=debian
        fi
    fi
    case "$route" in
        rustup)
            say "route: rustup (target $RUST_TARGET installed in $(rustc -V)), linker $LINKER"
            local miss; miss="$(missing_pkgs ${APT_PACKAGES// /$'\n'} | tr ' ' '\n' | grep -v -e rustc-web -e cargo-web -e libstd-rust || true)"
            [ -z "$miss" ] || apt_install $miss
            CARGO_TARGET_DIR="$tdir" cargo build -p edge-agent --profile edge --target "$RUST_TARGET" "${features_args[@]}"
            ;;
        cross)
            say "route: cross ($(command -v cross))"
            CARGO_TARGET_DIR="$tdir" cross build -p edge-agent --profile edge --target "$RUST_TARGET" "${features_args[@]}"
            ;;
        debian)
            local miss
            miss="$(missing_pkgs $APT_PACKAGES)"
            if [ -n "$miss" ] || [ ! -x /usr/bin/rustc ] || [ ! -d "/usr/lib/rustlib/$RUST_TARGET/lib" ]; then
                if [ "$target" = armv7 ] && ! dpkg --print-foreign-architectures | grep -qx armhf \
                    && [ "${ACOA_ALLOW_ARMHF:-0}" != 1 ]; then
                    die "armv7 needs dpkg architecture armhf; on this project's mirror its bookworm-security index does not download, which makes every apt-get update fail and hides rustc-web 1.96 (see cross/README.md, armv7). Set ACOA_ALLOW_ARMHF=1 to register it anyway"
                fi
                apt_install $APT_PACKAGES
            fi
            [ -x /usr/bin/rustc ] || die "/usr/bin/rustc missing after installing rustc-web"
            [ -d "/usr/lib/rustlib/$RUST_TARGET/lib" ] || die "no standard library for $RUST_TARGET in /usr/lib/rustlib (libstd-rust-web-dev:$DEB_ARCH)"
            # the Debian std must be the very same release as the compiler
            local stdv
            stdv="$(dpkg-query -W -f='${Version}' "libstd-rust-web-dev:$DEB_ARCH" 2>/dev/null || true)"
            local rv
            rv="$(dpkg-query -W -f='${Version}' rustc-web 2>/dev/null || true)"
            [ -z "$stdv" ] || [ "$stdv" = "$rv" ] || die "libstd-rust-web-dev:$DEB_ARCH $stdv does not match rustc-web $rv"
            local cargo_bin
            cargo_bin="$(command -v cargo || echo /usr/bin/cargo)"
            say "route: debian ($(/usr/bin/rustc -V), std $RUST_TARGET from libstd-rust-web-dev:$DEB_ARCH, cargo $("$cargo_bin" -V | cut -d' ' -f2), linker $LINKER)"
            if ! RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc CARGO_TARGET_DIR="$tdir" \
                "$cargo_bin" build -p edge-agent --profile edge --target "$RUST_TARGET" "${features_args[@]}"; then
                # bookworm's own rustc-web is 1.85; the locked dependencies need the newer one of
                # bookworm-security, which apt drops entirely when one of its indexes fails.
                die "cargo failed with $(/usr/bin/rustc -V); if it says a package needs a newer rustc: apt-get update must fetch bookworm-security (apt-cache policy rustc-web) and then apt-get install rustc-web cargo-web libstd-rust-web-dev:$DEB_ARCH"
            fi
            ;;
        *) die "unknown route $route (rustup, cross or debian)" ;;
    esac
    out_bin="$tdir/$RUST_TARGET/edge/edge-agent"
}

start=$(date +%s)
if [ "$RUST_TARGET" = "$host_triple" ]; then build_host; else build_cross; fi
[ -x "$out_bin" ] || die "no binary at $out_bin"
mkdir -p "$DIST/$target"
cp -f "$out_bin" "$DIST/$target/edge-agent"
secs=$(( $(date +%s) - start ))
size=$(stat -c %s "$DIST/$target/edge-agent")
say "built $DIST/$target/edge-agent: $size bytes ($(( size / 1024 )) KiB) in ${secs}s"
say "  $(file -b "$DIST/$target/edge-agent" | cut -d, -f1-2,5-)"

if [ "$want_deb" = 1 ]; then
    "$ROOT/cross/mkdeb.sh" --target "$target" --bin "$DIST/$target/edge-agent" --out "$DIST"
fi
