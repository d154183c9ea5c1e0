#!/usr/bin/env bash
# Installs what stoker needs (Debian 12 packages), builds into build/ and runs
# every test (C++ unit tests, end-to-end tests against the real daemon,
# Python tests) through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
stoker_ensure_packages
echo "==> building into build/"
stoker_build build -DSTOKER_WERROR=ON
# --- lock annotations (issue 14): clang's -Wthread-safety over server/, common/, pipeline/, no codegen ---
scripts/thread-safety.sh build
# --- end lock annotations ---
echo "==> running the tests"
ctest --test-dir build --output-on-failure --timeout 900 -j 2
# --- sanitizers and fuzzing (issue 4): ASan+UBSan C++ tests, then each fuzz target 25 s ---
t0=$SECONDS
scripts/sanitize.sh
echo "==> sanitize.sh took $((SECONDS - t0)) s"
t0=$SECONDS
scripts/fuzz.sh 25
echo "==> fuzz.sh took $((SECONDS - t0)) s"
# --- end sanitizers and fuzzing ---
scripts/container-test.sh  # issue 7: the sidecar image end to end; prints "skipped" without a container engine
