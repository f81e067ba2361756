#!/usr/bin/env bash
# The code map in docs/architecture.md lists every module with the first sentence of its `//!`
# note; this fails when a module was added, moved or re-described without the map following.
# Fix with: scripts/code_map.py --write
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/code_map.py
