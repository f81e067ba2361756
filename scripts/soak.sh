#!/usr/bin/env bash
# The short soak (engine-bin/tests/soak.rs): a steady workload of periodic tasks, a failing
# task feeding the dead-letter queue and task churn, for AX_SOAK_MINUTES (default 2) on a
# private etcd and Redis; every store must level off over the last third. Run by
# scripts/test.sh. For the long run behind docs/benchmarks.md:
#   AX_SOAK_MINUTES=30 AX_SOAK_TASKS=2000 AX_SOAK_SVG=docs/soak.svg \
#     cargo test --release -p ax --test soak -- --nocapture
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/cargo.sh
. scripts/cargo.sh
: "${AX_TEST_ETCD:?start the servers first (scripts/test.sh does)}"
export AX_SOAK_MINUTES="${AX_SOAK_MINUTES:-2}"
ax_cargo_test --test soak -- --nocapture 2>&1 | grep -E '^soak:|panicked|test result|FAILED|^\s+left|^\s+right'
test "${PIPESTATUS[0]}" -eq 0
