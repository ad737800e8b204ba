#!/usr/bin/env bash
# The aarch64 agent under qemu-aarch64-static, against a real Mosquitto on loopback:
# it starts, reads its configuration (the train-security profile rendered for n13), connects with
# its credentials, and publishes a signed node report that decodes with acoa_shared::wire
# (cross/tools: acoa-wire decode). Exits non-zero on any failure; last line:
#   cross qemu: N passed, M failed
#
# Needs: qemu-user-static, mosquitto, mosquitto-clients, the aarch64 cross route (cross/build.sh
# installs it when run as root). ACOA_SKIP_BUILD=1 uses target-cross/dist/aarch64/edge-agent as is.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CROSS_ROOT"
. targets/aarch64.env

work="$(mktemp -d /tmp/acoa-qemu.XXXXXX)"
pids=()
cleanup() {
    for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    if [ "$FAILED" = 0 ]; then rm -rf "$work"; else echo "cross qemu: logs kept in $work"; fi
}
trap cleanup EXIT

echo "cross qemu: aarch64 edge-agent under $QEMU"
bin="${ACOA_DIST:-$CROSS_ROOT/target-cross/dist}/aarch64/edge-agent"
if [ "${ACOA_SKIP_BUILD:-0}" != 1 ] || [ ! -x "$bin" ]; then
    check "cross/build.sh --target aarch64 builds the agent" bash -c "cross/build.sh --target aarch64 > '$work/build.log' 2>&1 || { tail -30 '$work/build.log'; exit 1; }"
fi
if [ ! -x "$bin" ]; then
    fail "no aarch64 binary at $bin"
    summary "cross qemu"; exit 1
fi
check "binary is an aarch64 ELF executable" bash -c "file -b '$bin' | grep -q 'ARM aarch64'"

for tool in "$QEMU" mosquitto mosquitto_sub mosquitto_passwd; do
    command -v "$tool" >/dev/null || fail "$tool on PATH" "install qemu-user-static mosquitto mosquitto-clients"
done
[ "$FAILED" = 0 ] || { summary "cross qemu"; exit 1; }
# LD_LIBRARY_PATH: see targets/aarch64.env (mixed glibc builds hang at the first thread)
qemu_run=("$QEMU" -L "$QEMU_LD_PREFIX" -E "LD_LIBRARY_PATH=$QEMU_LD_PREFIX/lib")
run_a64() { "${qemu_run[@]}" "$bin" "$@"; }

check "starts under qemu (--help)" run_a64 --help

# the node key, as postinst would create it
mkdir -p "$work/state" "$work/cp"
node_pub="$(run_a64 pubkey --state-dir "$work/state" 2>"$work/pubkey.err")"
if [[ "$node_pub" =~ ^[0-9a-f]{64}$ ]] && [ -s "$work/state/node.key" ]; then
    pass "pubkey creates the node key and prints 64 hex digits"
else
    fail "pubkey creates the node key and prints 64 hex digits" "got '$node_pub' $(cat "$work/pubkey.err")"
fi
again="$(run_a64 pubkey --state-dir "$work/state" 2>/dev/null)"
[ "$again" = "$node_pub" ] && pass "pubkey is stable across runs" || fail "pubkey is stable across runs" "$again"
# a control plane key for the config (any valid ed25519 public key does for reports)
cp_pub="$(run_a64 pubkey --state-dir "$work/cp" 2>/dev/null)"

# a real broker with password authentication on a free loopback port
port="$(free_port)"
tls_port="$(free_port)"
while [ "$tls_port" = "$port" ]; do tls_port="$(free_port)"; done
# a CA and a server certificate for 127.0.0.1, for the mqtts:// run (rustls + ring on aarch64)
tls=0
if command -v openssl >/dev/null; then
    (cd "$work" && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -subj /CN=acoa-cross-ca -keyout ca.key -out ca.pem \
        && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=localhost \
            -keyout server.key -out server.csr \
        && printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > san.ext \
        && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
            -extfile san.ext -out server.pem) >/dev/null 2>&1 && tls=1
fi
mosquitto_passwd -c -b "$work/passwd" n13 n13-secret >/dev/null 2>&1
mosquitto_passwd -b "$work/passwd" observer observer-secret >/dev/null 2>&1
cat > "$work/mosquitto.conf" <<EOF
listener $port 127.0.0.1
allow_anonymous false
password_file $work/passwd
persistence false
user root
log_dest file $work/mosquitto.log
log_type error
log_type warning
log_type notice
EOF
if [ "$tls" = 1 ]; then
    printf 'listener %s 127.0.0.1\ncafile %s\ncertfile %s\nkeyfile %s\n' "$tls_port" \
        "$work/ca.pem" "$work/server.pem" "$work/server.key" >> "$work/mosquitto.conf"
fi
mosquitto -c "$work/mosquitto.conf" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 1 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
done
sub() { mosquitto_sub -h 127.0.0.1 -p "$port" -u observer -P observer-secret "$@"; }

# the node's configuration: the train-security profile rendered for n13, pointed at this broker;
# arch left out so that the report carries the binary's own architecture
wire="$(acoa_wire)" || { fail "acoa-wire (cross/tools) builds"; summary "cross qemu"; exit 1; }
probe_port="$(free_port)"
podman_sock="unix://$work/no-podman.sock"
[ -S /run/podman/podman.sock ] && podman_sock="unix:///run/podman/podman.sock"
"$wire" render --cluster scenarios/railway/cluster.yaml --profiles targets/profiles --node n13 \
    --set "broker.url=mqtt://127.0.0.1:$port" --set broker.password=n13-secret \
    --set "broker.control_plane_key=$cp_pub" --set "state_dir=$work/state" \
    --set "probe.listen=127.0.0.1:$probe_port" --set "podman.socket=$podman_sock" \
    | sed '/^arch = /d' > "$work/n13.toml"
agent_host="$(host_agent)" || { fail "edge-agent for this host builds (check-config)"; summary "cross qemu"; exit 1; }
check "rendered n13 config matches the cluster file" "$agent_host" check-config --cluster scenarios/railway/cluster.yaml "$work/n13.toml"
check "the aarch64 agent itself accepts the rendered config (check-config under qemu)" "${qemu_run[@]}" "$bin" check-config "$work/n13.toml"

# subscribe first, then start the agent
sub -t acoa/v1/nodes/n13/report -C 1 -W 120 -N > "$work/report.bin" 2>"$work/sub.err" &
sub_pid=$!
pids+=($sub_pid)
sleep 0.5
start_ms=$(date +%s%3N)
RUST_LOG=info "${qemu_run[@]}" "$bin" --config "$work/n13.toml" > "$work/agent.log" 2>&1 &
agent_pid=$!
pids+=($agent_pid)
wait "$sub_pid"
ms=$(( $(date +%s%3N) - start_ms ))
if [ -s "$work/report.bin" ]; then
    pass "publishes a node report on acoa/v1/nodes/n13/report (${ms} ms after start)"
else
    fail "publishes a node report on acoa/v1/nodes/n13/report" "$(tail -5 "$work/agent.log")"
fi

if "$wire" decode --key "$node_pub" "$work/report.bin" > "$work/report.txt" 2>&1; then
    pass "report decodes (acoa_shared::wire) and verifies with the node key"
else
    fail "report decodes (acoa_shared::wire) and verifies with the node key" "$(cat "$work/report.txt")"
fi
head -n 1 "$work/report.txt" | sed 's/^/        /'
json="$(sed -n 2p "$work/report.txt")"
expect() {
    # expect NAME PATTERN: the decoded report's JSON holds PATTERN
    if grep -q -- "$2" <<<"$json"; then pass "$1"; else fail "$1" "no $2 in $json"; fi
}
expect "report names node n13 of datacenter train1, layer edge" '"node":"n13".*"datacenter":"train1","layer":"edge"'
expect "report carries arch aarch64 (the binary's own)" '"arch":"aarch64"'
expect "report carries the profile's labels" '"hardware":\["smoke-sensor"\]'
expect "report carries the configured capacity" '"capacity":{"cpu_millis":2000,"memory_mb":2048,"disk_mb":16000'
expect "report carries the probe address" "\"probe_addr\":\"127.0.0.1:$probe_port\""
expect "report carries the agent's first run (a new state directory)" '"seq":[0-9]*,"run":1,'

if [ "$podman_sock" = "unix:///run/podman/podman.sock" ]; then
    # the node has no desired state, so the agent only lists its (labelled) containers
    reaches_runtime "reaches the Podman API at /run/podman/podman.sock" "$work/agent.log"
else
    echo "  skip  Podman API check (no /run/podman/podman.sock here; the agent ran without it)"
fi

# qemu's user-mode emulation refuses SO_TIMESTAMPNS and SO_TIMESTAMPING: the prober must fall
# back to SO_TIMESTAMP (microseconds), not to the thread's wake-up times (which
# would add the emulation's CPU wait to every measured delay)
if grep -q 'no kernel receive timestamps' "$work/agent.log"; then
    fail "probe socket has kernel receive timestamps under qemu" "$(grep 'kernel receive' "$work/agent.log" | tail -1)"
else
    pass "probe socket has kernel receive timestamps under qemu ($(grep -o 'SO_TIMESTAMP[A-Z]*; SO_TIMESTAMPNS refused' "$work/agent.log" | head -1 || true))"
fi

# the online marker: a signed presence of this connection (wire v3), retained
presence() {
    # presence FILE: the retained marker, decoded and verified with the node key (JSON line)
    sub -t acoa/v1/nodes/n13/online -C 1 -W 10 -N > "$1" 2>/dev/null
    "$wire" decode --key "$node_pub" "$1" 2>&1 | sed -n 2p
}
online="$(presence "$work/online.bin")"
grep -q '"online":true' <<<"$online" && pass "online marker is retained as a signed presence, online" \
    || fail "online marker is retained as a signed presence, online" "$online"

# a clean stop (SIGTERM through qemu) leaves a signed 'offline' presence behind
kill -TERM "$agent_pid" 2>/dev/null
stopped=0
for _ in $(seq 1 100); do kill -0 "$agent_pid" 2>/dev/null || { stopped=1; break; }; sleep 0.1; done
[ "$stopped" = 1 ] && pass "stops on SIGTERM within 10 s" || fail "stops on SIGTERM within 10 s"
offline="$(presence "$work/offline.bin")"
grep -q '"online":false' <<<"$offline" && pass "online marker is a signed presence, offline, after the stop" \
    || fail "online marker is a signed presence, offline, after the stop" "$offline"

# the same node over mqtts:// with the CA file: the default build's TLS (rustls, ring) on aarch64
if [ "$tls" = 1 ]; then
    sed -e "s|^url = .*|url = \"mqtts://127.0.0.1:$tls_port\"|" \
        -e "/^\[broker\]/a ca_file = \"$work/ca.pem\"" "$work/n13.toml" > "$work/n13-tls.toml"
    sub -t acoa/v1/nodes/n13/report -C 1 -W 120 -N > "$work/report-tls.bin" 2>"$work/sub-tls.err" &
    sub_pid=$!
    pids+=($sub_pid)
    sleep 0.5
    RUST_LOG=info "${qemu_run[@]}" "$bin" --config "$work/n13-tls.toml" > "$work/agent-tls.log" 2>&1 &
    agent_pid=$!
    pids+=($agent_pid)
    wait "$sub_pid"
    if [ -s "$work/report-tls.bin" ] && "$wire" decode --key "$node_pub" "$work/report-tls.bin" >/dev/null 2>&1; then
        pass "over mqtts:// (CA file, rustls/ring on aarch64): report arrives and verifies"
    else
        fail "over mqtts:// (CA file, rustls/ring on aarch64): report arrives and verifies" "$(tail -5 "$work/agent-tls.log")"
    fi
    kill -TERM "$agent_pid" 2>/dev/null
    wait "$agent_pid" 2>/dev/null
else
    echo "  skip  mqtts:// run (no openssl to make a CA)"
fi

if [ "$FAILED" != 0 ]; then
    echo "--- agent log (tail)"; tail -20 "$work/agent.log"
fi
summary "cross qemu"
