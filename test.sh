#!/usr/bin/env bash
# The project's test command (README.md): every crate's tests against the real things
# (Podman, Mosquitto, network namespaces), then the cross-build and package checks.
# Run .ci/setup once first on a fresh machine (root): it installs and configures them.
set -euo pipefail
cd "$(dirname "$0")"

# The k3s runtime is an optional feature of the agent (its client is heavy): keep it compiling.
cargo check -p edge-agent --features k3s --all-targets
cargo test --workspace --all-targets
bash cross/test.sh
