#!/usr/bin/env bash
# The packages (arm64 and amd64) and the node profiles: contents, binary architecture, unit
# (static checks + `systemd-analyze verify` where the tool exists), default configuration read by
# the agent itself, and, as root with dpkg and no acoa-agent installed yet, a real
# `dpkg -i` / `dpkg --purge` of the amd64 package. Exits non-zero on any failure; last line:
#   cross deb: N passed, M failed
# ACOA_SKIP_BUILD=1 uses the .debs in target-cross/dist as they are.
# ACOA_DEB_INSTALL_TEST=0 skips the install test.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CROSS_ROOT"

DIST="${ACOA_DIST:-$CROSS_ROOT/target-cross/dist}"
work="$(mktemp -d /tmp/acoa-deb.XXXXXX)"
trap 'if [ "$FAILED" = 0 ]; then rm -rf "$work"; else echo "cross deb: files kept in $work"; fi' EXIT

echo "cross deb: packages and profiles"
for t in aarch64 x86_64; do
    if [ "${ACOA_SKIP_BUILD:-0}" != 1 ] || ! ls "$DIST"/acoa-agent_*_"$(. targets/$t.env; echo "$DEB_ARCH")".deb >/dev/null 2>&1; then
        check "cross/build.sh --target $t --deb" bash -c "cross/build.sh --target $t --deb > '$work/build-$t.log' 2>&1 || { tail -30 '$work/build-$t.log'; exit 1; }"
    fi
done

wire="$(acoa_wire)" || { fail "acoa-wire (cross/tools) builds"; summary "cross deb"; exit 1; }
check "acoa-wire's own tests (cargo test, cross/tools)" env CARGO_TARGET_DIR="${ACOA_TOOLS_TARGET_DIR:-$CROSS_ROOT/target-cross}" cargo test -q --manifest-path cross/tools/Cargo.toml
agent="$(host_agent)" || { fail "edge-agent for this host builds (check-config)"; summary "cross deb"; exit 1; }

# --- the role profiles and the per-node configurations match the railway cluster file (judged by
# the agent's own configuration code: edge-agent check-config)
cluster=scenarios/railway/cluster.yaml
check "role profiles (targets/profiles) match $cluster" "$agent" check-config --cluster "$cluster" --templates targets/profiles/*.toml
check "node configs (targets/nodes) match $cluster" "$agent" check-config --cluster "$cluster" --templates targets/nodes/*.toml
check "targets/nodes is up to date (cross/render-nodes.sh)" bash -c "cross/render-nodes.sh --out '$work/nodes' 2>/dev/null && diff -r targets/nodes '$work/nodes'"
check "every node of the cluster has a config" bash -c "[ \$(ls targets/nodes/*.toml | wc -l) = \$(grep -c '^- name: ' $cluster) ]"

for t in aarch64 x86_64; do
    . "targets/$t.env"
    case "$t" in
        aarch64) file_pat='ARM aarch64'; machine='AArch64'; run=("$QEMU" -L "$QEMU_LD_PREFIX" -E "LD_LIBRARY_PATH=$QEMU_LD_PREFIX/lib") ;;
        x86_64) file_pat='x86-64'; machine='X86-64'; run=() ;;
    esac
    deb="$(ls -t "$DIST"/acoa-agent_*_"$DEB_ARCH".deb 2>/dev/null | head -n 1)"
    if [ -z "$deb" ]; then fail "$DEB_ARCH: a package in $DIST"; continue; fi
    echo " $DEB_ARCH: $(basename "$deb")"
    x="$work/$DEB_ARCH"
    check "$DEB_ARCH: dpkg-deb extracts the package" dpkg-deb -R "$deb" "$x"
    check "$DEB_ARCH: control says Package acoa-agent, Architecture $DEB_ARCH" \
        bash -c "[ \"\$(dpkg-deb -f '$deb' Package)\" = acoa-agent ] && [ \"\$(dpkg-deb -f '$deb' Architecture)\" = '$DEB_ARCH' ]"
    check "$DEB_ARCH: Depends names libc6" bash -c "dpkg-deb -f '$deb' Depends | grep -q 'libc6 (>= '"
    list="$(dpkg-deb -c "$deb")"
    for f in ./usr/bin/edge-agent ./etc/acoa/agent.toml ./lib/systemd/system/acoa-agent.service \
        ./usr/share/acoa-agent/profiles/train-security.toml ./usr/share/doc/acoa-agent/README.md; do
        if grep -q " $f\$" <<<"$list"; then pass "$DEB_ARCH: holds $f"; else fail "$DEB_ARCH: holds $f"; fi
    done
    check "$DEB_ARCH: files owned by root:root" bash -c "! dpkg-deb -c '$deb' | awk '{print \$2}' | grep -v '^root/root\$'"
    check "$DEB_ARCH: /etc/acoa/agent.toml is a conffile" grep -qx /etc/acoa/agent.toml "$x/DEBIAN/conffiles"
    check "$DEB_ARCH: maintainer scripts parse (sh -n)" bash -c "for s in postinst prerm postrm; do sh -n '$x/DEBIAN/'\$s || exit 1; done"

    b="$x/usr/bin/edge-agent"
    check "$DEB_ARCH: binary is $file_pat (file)" bash -c "file -b '$b' | grep -q '$file_pat'"
    check "$DEB_ARCH: ELF machine is $machine (readelf)" bash -c "readelf -h '$b' | grep -q 'Machine:.*$machine'"
    check "$DEB_ARCH: binary is stripped (no .symtab)" bash -c "! readelf -S '$b' | grep -q '\.symtab'"
    check "$DEB_ARCH: binary is 0755" bash -c "[ \"\$(stat -c %a '$b')\" = 755 ]"
    echo "        size: $(stat -c %s "$b") bytes"

    u="$x/lib/systemd/system/acoa-agent.service"
    for want in 'ExecStart=/usr/bin/edge-agent --config /etc/acoa/agent.toml' 'Restart=always' 'RestartSec=' \
        'StateDirectory=acoa-agent' 'NoNewPrivileges=yes' 'ProtectSystem=strict' 'ProtectHome=yes' \
        'PrivateTmp=yes' 'ReadWritePaths=-/run/podman' 'WantedBy=multi-user.target'; do
        if grep -q "^$want" "$u"; then pass "$DEB_ARCH: unit has $want"; else fail "$DEB_ARCH: unit has $want"; fi
    done
    if command -v systemd-analyze >/dev/null; then
        # verify wants ExecStart's binary on this host: point it at the extracted one
        sed "s|/usr/bin/edge-agent|$b|" "$u" > "$work/acoa-agent.service"
        check "$DEB_ARCH: systemd-analyze verify accepts the unit" systemd-analyze verify "$work/acoa-agent.service"
    else
        echo "  skip  $DEB_ARCH: systemd-analyze verify (no systemd-analyze here)"
    fi

    # the default configuration as the agent itself reads it
    st="$work/state-$DEB_ARCH"
    mkdir -p "$st"
    key="$("${run[@]}" "$b" pubkey --config "$x/etc/acoa/agent.toml" --state-dir "$st" 2>"$work/pubkey.err")"
    if [[ "$key" =~ ^[0-9a-f]{64}$ ]]; then pass "$DEB_ARCH: agent reads the default config (pubkey)"; else fail "$DEB_ARCH: agent reads the default config (pubkey)" "$key $(cat "$work/pubkey.err")"; fi
    # ...and refuses to run it before the CHANGE-ME values are edited, naming what is wrong
    out="$(timeout 20 "${run[@]}" "$b" --config "$x/etc/acoa/agent.toml" --state-dir "$st" 2>&1)"
    rc=$?
    if [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -qi 'control_plane_key\|CHANGE-ME' <<<"$out"; then
        pass "$DEB_ARCH: unedited default config is refused with a clear error"
    else
        fail "$DEB_ARCH: unedited default config is refused with a clear error" "rc=$rc: $(tail -2 <<<"$out")"
    fi
    check "$DEB_ARCH: shipped profiles match $cluster" "$agent" check-config --cluster "$cluster" --templates "$x"/usr/share/acoa-agent/profiles/*.toml
    check "$DEB_ARCH: the packaged agent accepts its shipped profiles and default config (check-config --templates)" \
        "${run[@]}" "$b" check-config --templates "$x"/usr/share/acoa-agent/profiles/*.toml "$x/etc/acoa/agent.toml"
done

# --- a real install of the amd64 package on this machine (root, dpkg, nothing installed yet)
deb="$(ls -t "$DIST"/acoa-agent_*_amd64.deb 2>/dev/null | head -n 1)"
if [ "${ACOA_DEB_INSTALL_TEST:-1}" = 1 ] && [ "$(id -u)" = 0 ] && [ "$(dpkg --print-architecture)" = amd64 ] \
    && [ -n "$deb" ] && ! dpkg-query -W acoa-agent >/dev/null 2>&1 && [ ! -e /var/lib/acoa-agent ]; then
    out="$(dpkg -i "$deb" 2>&1)"
    rc=$?
    echo "$out" | grep 'acoa-agent:' | sed 's/^/        /'
    [ "$rc" = 0 ] && pass "dpkg -i installs the amd64 package" || fail "dpkg -i installs the amd64 package" "$out"
    k="$(sed -n 's/.*node public key: \([0-9a-f]\{64\}\).*/\1/p' <<<"$out")"
    [ -n "$k" ] && pass "postinst prints the node's public key" || fail "postinst prints the node's public key"
    check "postinst created /var/lib/acoa-agent/node.key (0600 or stricter, dir 0700)" \
        bash -c "[ -s /var/lib/acoa-agent/node.key ] && [ \"\$(stat -c %a /var/lib/acoa-agent)\" = 700 ] && [ \$(( 0\$(stat -c %a /var/lib/acoa-agent/node.key) & 077 )) = 0 ]"
    check "installed edge-agent pubkey prints the same key" bash -c "[ \"\$(/usr/bin/edge-agent pubkey)\" = '$k' ]"
    check "dpkg --purge removes binary, unit and state" \
        bash -c "dpkg --purge acoa-agent >/dev/null 2>&1 && [ ! -e /usr/bin/edge-agent ] && [ ! -e /lib/systemd/system/acoa-agent.service ] && [ ! -e /var/lib/acoa-agent ] && [ ! -e /etc/acoa/agent.toml ]"
else
    echo "  skip  dpkg -i / --purge of the amd64 package (needs root on amd64, no acoa-agent installed, ACOA_DEB_INSTALL_TEST!=0)"
fi

# --- the unit's sandbox assumption: under ProtectSystem=strict the agent sees a read-only file
# system except its state directory; it must still create its key there, reach the broker and
# the Podman socket (connect() works on a read-only mount). Emulated with a private mount
# namespace (unshare -m) in which / and every other mount are remounted read-only.
b="$work/amd64/usr/bin/edge-agent"
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && command -v mosquitto >/dev/null && [ -x "$b" ]; then
    sb="$work/sandbox"
    mkdir -p "$sb/state"
    port="$(free_port)"
    printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence false\nuser root\n' "$port" > "$sb/m.conf"
    mosquitto -c "$sb/m.conf" >/dev/null 2>&1 &
    mpid=$!
    for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    cp_key="$("$b" pubkey --state-dir "$sb/cp" 2>/dev/null)"
    sock="unix://$sb/no-podman.sock"
    [ -S /run/podman/podman.sock ] && sock="unix:///run/podman/podman.sock"
    "$wire" render --cluster "$cluster" --profiles targets/profiles --node n13 \
        --set "broker.url=mqtt://127.0.0.1:$port" --set broker.password=x \
        --set "broker.control_plane_key=$cp_key" --set "state_dir=$sb/state" \
        --set probe.listen=127.0.0.1:0 --set "podman.socket=$sock" > "$sb/n13.toml"
    mosquitto_sub -h 127.0.0.1 -p "$port" -t acoa/v1/nodes/n13/report -C 1 -W 30 -N > "$sb/report.bin" 2>/dev/null &
    spid=$!
    unshare -m sh -c '
        mount --make-rprivate / && mount --bind "$1" "$1" || exit 1
        for m in $(findmnt -rn -o TARGET | sort -r); do
            [ "$m" = "$1" ] && continue
            case "$m" in /proc*|/sys*|/dev*) continue ;; esac
            mount -o remount,bind,ro "$m" 2>/dev/null
        done
        if touch /ro-probe 2>/dev/null; then rm -f /ro-probe; echo "root still writable"; exit 1; fi
        timeout 8 "$2" --config "$3"
        exit 0' sandbox "$sb/state" "$b" "$sb/n13.toml" > "$sb/agent.log" 2>&1
    urc=$?
    wait "$spid"
    kill "$mpid" 2>/dev/null
    wait "$mpid" 2>/dev/null
    [ "$urc" = 0 ] && pass "sandbox: read-only file system but the state directory (unshare -m)" \
        || fail "sandbox: read-only file system but the state directory (unshare -m)" "$(tail -3 "$sb/agent.log")"
    check "sandbox: the agent created its key in the state directory" test -s "$sb/state/node.key"
    check "sandbox: its report reached the broker and decodes" "$wire" decode "$sb/report.bin"
    if [ "$sock" = "unix:///run/podman/podman.sock" ]; then
        reaches_runtime "sandbox: reaches /run/podman/podman.sock on a read-only /run" "$sb/agent.log"
    fi
else
    echo "  skip  sandbox check (needs root, unshare, mosquitto)"
fi

summary "cross deb"
