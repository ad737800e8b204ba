# Helpers shared by the cross/ scripts (sourced).
CROSS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Builds the host tool acoa-wire (cross/tools) and prints its path.
acoa_wire() {
    local tdir="${ACOA_TOOLS_TARGET_DIR:-$CROSS_ROOT/target-cross}"
    # same dependency versions as the main workspace
    [ -f "$CROSS_ROOT/cross/tools/Cargo.lock" ] || cp "$CROSS_ROOT/Cargo.lock" "$CROSS_ROOT/cross/tools/Cargo.lock"
    CARGO_TARGET_DIR="$tdir" cargo build -q --manifest-path "$CROSS_ROOT/cross/tools/Cargo.toml" >&2 || return 1
    echo "$tdir/debug/acoa-wire"
}

# Builds the agent for this host (debug; default features, so with `check-config --cluster`)
# and prints its path: configurations are judged by the agent's own code.
host_agent() {
    local tdir="${ACOA_HOST_TARGET_DIR:-${CARGO_TARGET_DIR:-$CROSS_ROOT/target}}"
    CARGO_TARGET_DIR="$tdir" cargo build -q -p edge-agent --manifest-path "$CROSS_ROOT/Cargo.toml" >&2 || return 1
    echo "$tdir/debug/edge-agent"
}

# A free TCP port on loopback.
free_port() {
    python3 - <<'PY' 2>/dev/null || echo $(( 20000 + RANDOM % 20000 ))
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PY
}

# Test bookkeeping: check NAME CMD... runs CMD, counts and reports.
PASSED=0
FAILED=0
FAILED_NAMES=()
pass() { PASSED=$((PASSED + 1)); echo "  ok    $1"; }
fail() { FAILED=$((FAILED + 1)); FAILED_NAMES+=("$1"); echo "  FAIL  $1${2:+: $2}"; }
check() {
    local name="$1"; shift
    local out
    if out="$("$@" 2>&1)"; then pass "$name"; else fail "$name"; echo "$out" | sed 's/^/        /' | tail -20; fi
}
# pass "$1" when the agent's log "$2" does not say that the container runtime was unavailable
reaches_runtime() {
    if grep -q 'container runtime unavailable' "$2"; then
        fail "$1" "$(grep 'runtime unavailable' "$2" | tail -1)"
    else
        pass "$1"
    fi
}
summary() {
    # summary PREFIX: prints the closing line and returns non-zero on any failure
    echo "$1: $PASSED passed, $FAILED failed${FAILED_NAMES[*]:+ (${FAILED_NAMES[*]})}"
    [ "$FAILED" = 0 ]
}
