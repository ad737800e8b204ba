#!/usr/bin/env bash
# Builds every fuzz target with libFuzzer on the stable toolchain (no nightly, no cargo-fuzz:
# the coverage instrumentation is plain `-C` flags; libfuzzer-sys compiles libFuzzer with the
# system C++ compiler) and runs each for a fixed time over its committed corpus.
#
# Fails on a panic or crash, on one input running longer than FUZZ_TIMEOUT seconds (1), and on
# memory over FUZZ_RSS_MB (2048); the input that did it is kept in fuzz/artifacts/<target>/.
# New inputs found go to a scratch directory, not to the committed corpus (README.md says
# how to add them).
#
# Usage: fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]   (default 25 s, every target)
set -euo pipefail
cd "$(dirname "$0")"

secs=${1:-${FUZZ_SECONDS:-25}}
[ $# -gt 0 ] && shift
all=(wire jobs model topics agent_config stats prober)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
timeout=${FUZZ_TIMEOUT:-1}
rss=${FUZZ_RSS_MB:-2048}

# The largest input each target is given (frames up to a few kB, documents up to 16 kB).
max_len() {
  case $1 in
    jobs) echo 16384 ;;
    model) echo 16384 ;;
    agent_config) echo 4096 ;;
    prober) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

host=$(rustc -vV | sed -n 's/^host: //p')
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$PWD/target}
# Instrument only the target's code, not build scripts or proc macros: hence --target.
export RUSTFLAGS="-Cpasses=sancov-module \
 -Cllvm-args=-sanitizer-coverage-level=4 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
 -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares \
 -Cdebug-assertions -Coverflow-checks -Cforce-frame-pointers=yes"
echo "fuzz: building ${#targets[@]} targets ($host, release, instrumented)"
# Not --locked: a dependency added to shared/ or edge-agent/ is added to this lock, the rest stays pinned.
cargo build --release --target "$host" $(printf -- '--bin %s ' "${targets[@]}")
bin=$CARGO_TARGET_DIR/$host/release

# A panic's backtrace is symbolized slowly; a time-out alarm that fires meanwhile can hang
# libFuzzer's crash path, so there is none (the panic's message names the file and line), and
# each run is cut off a minute after its time in any case.
export RUST_BACKTRACE=${FUZZ_BACKTRACE:-0}
mkdir -p logs
scratch=$(mktemp -d)
# agent_config writes each input to a file of its process (in /dev/shm, else the temporary directory)
trap 'rm -rf "$scratch"; rm -f /dev/shm/acoa-fuzz-agent-config-*.toml "${TMPDIR:-/tmp}"/acoa-fuzz-agent-config-*.toml' EXIT
passed=0
failed=0
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t" "$scratch/$t"
  dict=()
  [ -f "dict/$t.dict" ] && dict=(-dict="dict/$t.dict")
  log=logs/$t.log
  set +e
  timeout --kill-after=10 $((secs + 60)) "$bin/$t" "$scratch/$t" "corpus/$t" "${dict[@]}" \
    -max_total_time="$secs" -timeout="$timeout" -rss_limit_mb="$rss" \
    -max_len="$(max_len "$t")" -artifact_prefix="artifacts/$t/" \
    -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1 || true)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1))
    echo "fuzz: $t ok: ${execs:-?} inputs in ${secs} s, ${cov:-cov: ?}, $(ls "$scratch/$t" | wc -l) new"
  else
    failed=$((failed + 1))
    echo "fuzz: $t FAILED (exit $rc); the end of $log:"
    grep -E 'panicked at|ERROR: libFuzzer|SUMMARY|Test unit written|ALARM|out-of-memory' "$log" | head -20 | sed 's/^/  /' || true
    tail -5 "$log" | sed 's/^/  /'
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ $failed -eq 0 ]
