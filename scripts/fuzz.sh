#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang into build-fuzz/ and runs
# each for SECONDS (default 60) from generated seed corpora; exits non-zero
# if a target crashes (the reproducer is left in build-fuzz/artifacts/).
#
#   scripts/fuzz.sh [SECONDS]
#   STOKER_FUZZ_BUILD_DIR=/tmp/build-fuzz scripts/fuzz.sh 300
#
# Replay a crash: build-fuzz/fuzz/stoker_fuzz_decode build-fuzz/artifacts/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
secs=${1:-60}
dir=${STOKER_FUZZ_BUILD_DIR:-build-fuzz}
STOKER_PACKAGES+=("${STOKER_FUZZ_PACKAGES[@]}")
stoker_ensure_packages

echo "==> building the fuzz targets with clang into $dir/"
stoker_ccache_env
if [[ ! -f $dir/build.ninja ]]; then
  # shellcheck disable=SC2046
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    $(stoker_ccache_args) -DSTOKER_FUZZ=ON -DSTOKER_PYTHON=OFF -DSTOKER_CUDA=OFF >/dev/null
fi
targets=(decode ring tar video volume png webp tiff stb)
cmake --build "$dir" -j "$(nproc)" --target "${targets[@]/#/stoker_fuzz_}"

rm -rf "$dir/seeds"
echo "==> replaying every target's seeds (ctest -L fuzz)"
ctest --test-dir "$dir" -L fuzz --output-on-failure
mkdir -p "$dir/artifacts"

status=0
for t in "${targets[@]}"; do
  corpus=$dir/corpus/$t
  mkdir -p "$corpus"
  extra=()
  [[ $t == decode ]] && extra=(-dict=fuzz/jpeg.dict)
  echo "==> fuzzing stoker_fuzz_$t for ${secs} s"
  log=$dir/fuzz-$t.log
  # New inputs go to the first folder; the seeds are read only.
  if ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1} \
      UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
      "$dir/bin/stoker_fuzz_$t" "$corpus" "$dir/seeds/$t" "${extra[@]}" \
      -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$dir/artifacts/$t-" >"$log" 2>&1; then
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "    stoker_fuzz_$t: ${execs:-?} executions, no crash (corpus: $(ls "$corpus" | wc -l) files)"
  else
    status=1
    echo "    stoker_fuzz_$t FAILED; the end of its log ($log):" >&2
    tail -n 60 "$log" >&2
    ls -l "$dir/artifacts" >&2 || true
  fi
done
exit $status
