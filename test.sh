#!/usr/bin/env bash
# The project's test command (README.md): every crate's tests against the real things
# (Podman, Mosquitto, network namespaces), then the cross-build and package checks, then a
# short run of every fuzz target over its committed corpus.
# Run .ci/setup once first on a fresh machine (root): it installs and configures them.
set -euo pipefail
cd "$(dirname "$0")"

# The k3s runtime is an optional feature of the agent (its client is heavy): keep it compiling.
cargo check -p edge-agent --features k3s --all-targets
# The paper simulations and synthetic benchmarks are behind the scheduler's `sim` feature.
cargo check -p acoa-scheduler --features sim --all-targets
cargo test -p acoa-scheduler --features sim --test synthetic
# --no-fail-fast: one failing test binary does not hide the others' results in the CI log.
cargo test --workspace --all-targets --no-fail-fast
bash cross/test.sh
# Every decoder fed by the network or a file, 20 s each (fuzz/README.md runs them longer).
bash fuzz/run.sh "${FUZZ_SECONDS:-20}"
