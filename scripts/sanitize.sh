#!/usr/bin/env bash
# Builds stoker with ASan+UBSan (gcc) into build-asan/ and runs the C++ tests
# through CTest: unit tests, end to end against the real (sanitized) daemon
# and its workers, and the fault tests. The Python module is not built here
# (CPython is not ASan-instrumented).
#
#   scripts/sanitize.sh
#   STOKER_ASAN_BUILD_DIR=/tmp/build-asan scripts/sanitize.sh
#
# Leak checking is on (detect_leaks=1). The test daemons run their workers
# with --no-worker-sandbox (STOKER_TEST_DAEMON_ARGS, read by
# testing/daemon_harness.cc and tests/python/conftest.py): on every longjmp out
# of libjpeg (each corrupt file) ASan calls sigaltstack, which the workers'
# seccomp filter denies, and ASan then aborts the worker.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
dir=${STOKER_ASAN_BUILD_DIR:-build-asan}
stoker_ensure_packages
echo "==> building with ASan+UBSan into $dir/"
stoker_build "$dir" -DSTOKER_SANITIZE=ON -DSTOKER_PYTHON=OFF -DSTOKER_CUDA=OFF
echo "==> running the C++ tests under ASan+UBSan"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export STOKER_TEST_DAEMON_ARGS=${STOKER_TEST_DAEMON_ARGS:---no-worker-sandbox}
ctest --test-dir "$dir" --output-on-failure --timeout 900 -j 2
