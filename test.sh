#!/usr/bin/env bash
# The project's test command (README.md): every crate's tests against the real things
# (Podman, Mosquitto, network namespaces), then the cross-build and package checks.
# Run .ci/setup once first on a fresh machine (root): it installs and configures them.
set -euo pipefail
cd "$(dirname "$0")"

cargo test --workspace --all-targets
if [ -x cross/test.sh ]; then
  bash cross/test.sh
fi
