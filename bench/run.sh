#!/usr/bin/env bash
# One command: installs what stoker needs (the packages scripts/test.sh
# installs), builds into build/, makes or reuses the datasets under
# bench/data/, runs the benchmark and writes bench/RESULTS.md and
# bench/results.png. Options go to bench/bench.py (--quick for a smoke run).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
stoker_ensure_packages
echo "==> building into build/"
stoker_build build
exec /usr/bin/python3 bench/bench.py --build build "$@"
