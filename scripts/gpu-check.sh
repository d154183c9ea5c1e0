#!/usr/bin/env bash
# The GPU check (issue 5): one script for a machine with a GPU, CUDA, CMake
# and PyTorch but none of stoker's Debian libraries (no gRPC, absl, spdlog,
# Catch2). It builds only the CUDA part of the client (client/src/cuda_*) and
# a standalone harness with nvcc, then checks and measures:
#
#   - the normalize kernel against the CPU reference, fresh random input;
#   - the half/bfloat16 rounding against CUDA's intrinsics (all 2^32 floats);
#   - H2D GB/s of a 256x224x224x3 uint8 batch: registered ring-like shm vs
#     cudaMallocHost vs pageable (target: registered >= 90% of pinned);
#   - that a ring copy overlaps a kernel running on another stream;
#   - that no slot is reused before its copy finished (each slot is poisoned
#     the moment it is released; the device data is verified), with a
#     control run that releases early and must be caught;
#   - with PyTorch: torch stream semantics on every GPU (no synchronize), and
#     the copy+normalize feed ceiling in images/s into torch tensors;
#   - end to end through stokerd into GPU memory: with the bundle that
#     scripts/gpu-bundle.sh makes here (stokerd, its worker, stoker-gpu-feed
#     and their Debian libraries and loader; the device tool carries it), the
#     fp16 feed rate against the daemon's CPU-only rate, and the device data
#     against the CPU reference; then stoker.Loader(device='cuda') through
#     the same daemon, with stoker._native built there for that machine's
#     Python from the bundle's py.tar.gz (tests/gpu_check_loader.py: rate,
#     device normalize and padding vs the CPU, MixUp/CutMix on CUDA vs CPU).
#
# Prints a short table last. Exit status: 0 all passed, 1 a check failed,
# 2 no CUDA device (or no nvcc). Bounded: well under 8 minutes.
#
#   scripts/gpu-check.sh              # build into ${GPU_CHECK_BUILD:-/tmp/stoker-gpu-check}
#   NVCC=/usr/local/cuda/bin/nvcc CUDA_ARCH=90 scripts/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${GPU_CHECK_BUILD:-/tmp/stoker-gpu-check}
ARCH=${CUDA_ARCH:-90}
PY=${PYTHON:-python3}
START=$(date +%s)
mkdir -p "$OUT"
RESULTS="$OUT/results.txt"
: >"$RESULTS"

note() { echo "==> $*"; }
row() { echo "RESULT|$1|$2|$3|$4" >>"$RESULTS"; }
# json_field KEY <<<'{"KEY":value,...}': a number or a plain string value.
json_field() { sed -n "s/.*\"$1\":\"\{0,1\}\([A-Za-z0-9._-]*\).*/\1/p"; }
# wait_serving STOKERCTL SOCKET: up to 20 s for a daemon to be SERVING (it
# listens while it calibrates its decode and spawns its workers; the CPU-only
# rate must not count that time).
wait_serving() {
  for _ in $(seq 200); do "$1" health --socket "$2" >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}

# python_loader BUNDLE SOCKET BATCH: builds stoker._native for this machine's
# Python (its pybind11 and headers, the bundle's py.tar.gz: the client's static
# libraries and the headers it needs; the bundle's Debian libraries but not its
# glibc or libstdc++, found through the module's RPATH), then runs
# tests/gpu_check_loader.py against the daemon at SOCKET.
python_loader() {
  local g=$1 sock=$2 batch=$3 x=$OUT/py
  if [[ ! -f $g/py.tar.gz ]] || ! "$PY" -c 'import torch, pybind11' 2>/dev/null; then
    row "Loader(device='cuda')" "skipped: no py.tar.gz in the bundle, or no torch/pybind11" "-" "SKIP"
    return 0
  fi
  note "stoker._native for $("$PY" --version) (pybind11 $("$PY" -c 'import pybind11; print(pybind11.__version__)'))"
  rm -rf "$x" && mkdir -p "$x/so" "$x/python/stoker" && tar -C "$x" -xzf "$g/py.tar.gz"
  local f
  for f in "$g"/lib/*; do
    case $(basename "$f") in
      ld-linux* | libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | libstdc++* | libgcc_s*) ;;
      *) ln -s "$f" "$x/so/" ;;
    esac
  done
  cp "$ROOT"/client/python/stoker/*.py "$x/python/stoker/"
  cp -r "$ROOT"/client/python/stoker/loader "$x/python/stoker/"
  local cuda ext
  cuda=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
  ext=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  if ! timeout 300 "${CXX:-c++}" -O2 -std=c++20 -fPIC -shared -fvisibility=hidden -pthread \
    -I "$ROOT" -I "$ROOT/client/src" -I "$ROOT/client/include" -I "$ROOT/proto" -I "$x/include" \
    -isystem "$("$PY" -c 'import pybind11; print(pybind11.get_include())')" \
    -isystem "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
    "$ROOT/client/python/stoker_native.cc" -o "$x/python/stoker/_native$ext" \
    -Wl,--start-group "$x"/lib/*.a -Wl,--end-group -Wl,--as-needed "$x"/so/*.so* \
    -L "$cuda/lib64" -L "$cuda/targets/x86_64-linux/lib" -lcudart_static -ldl -lrt \
    -Wl,--disable-new-dtags,-rpath,"$x/so"; then
    row "Loader(device='cuda')" "building stoker._native failed (see above)" "-" "FAIL"
    return 1
  fi
  timeout 240 env PYTHONPATH="$x/python" PYTHONUNBUFFERED=1 "$PY" \
    "$ROOT/tests/gpu_check_loader.py" "$sock" ds "$batch" ${GPU_CHECK_STAND_IN:+--stand-in} | tee "$OUT/loader.log"
  local rc=${PIPESTATUS[0]}
  grep '^RESULT|' "$OUT/loader.log" >>"$RESULTS"
  ((rc == 124)) && row "Loader(device='cuda')" "timed out after 240 s" "-" "FAIL"
  ((rc == 0))
}

table() {
  echo
  echo "stoker GPU check ($(($(date +%s) - START)) s)"
  printf '%-48s %-58s %-22s %s\n' "check" "value" "target" "status"
  printf '%-48s %-58s %-22s %s\n' "-----" "-----" "------" "------"
  local name value target verdict
  while IFS='|' read -r _ name value target verdict; do
    printf '%-48s %-58s %-22s %s\n' "$name" "$value" "$target" "$verdict"
  done < <(grep '^RESULT|' "$RESULTS")
}

# --- build -------------------------------------------------------------------
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [[ ! -x $NVCC ]]; then
  row "build" "no nvcc (set NVCC=...)" "-" "FAIL"
  table
  exit 2
fi
note "building the harness with $NVCC (sm_$ARCH + compute_$ARCH PTX, static cudart)"
FLAGS=(-O2 -std=c++17 -cudart static
  "-gencode=arch=compute_$ARCH,code=[sm_$ARCH,compute_$ARCH]"
  -Xcompiler=-fPIC,-Wall,-Wextra,-Wno-unused-parameter -I "$ROOT/client/src" -I "$ROOT")
build_ok=1
pids=()
for src in client/src/cuda_normalize.cu client/src/cuda_ring_copier.cc tests/gpu_check_capi.cc; do
  timeout 300 "$NVCC" "${FLAGS[@]}" -c "$ROOT/$src" -o "$OUT/$(basename "$src").o" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || build_ok=0; done
if ((build_ok)); then
  timeout 300 "$NVCC" "${FLAGS[@]}" "$ROOT/tests/gpu_check.cu" \
    "$OUT/cuda_normalize.cu.o" "$OUT/cuda_ring_copier.cc.o" -o "$OUT/gpu_check" -lrt || build_ok=0
  timeout 120 "$NVCC" "${FLAGS[@]}" -shared "$OUT/cuda_normalize.cu.o" \
    "$OUT/cuda_ring_copier.cc.o" "$OUT/gpu_check_capi.cc.o" -o "$OUT/libstoker_gpucheck.so" \
    -lrt || build_ok=0
fi
if ((!build_ok)); then
  row "build" "nvcc failed (see above)" "-" "FAIL"
  table
  exit 1
fi
row "build" "$("$NVCC" --version | tail -1)" "-" "PASS"
if [[ ${GPU_CHECK_BUILD_ONLY:-0} == 1 ]]; then
  table
  exit 0
fi

# --- device checks -----------------------------------------------------------
note "device checks"
timeout 300 "$OUT/gpu_check" | tee "$OUT/gpu_check.log"
rc=${PIPESTATUS[0]}
grep '^RESULT|' "$OUT/gpu_check.log" >>"$RESULTS"
if ((rc == 2)); then
  table
  exit 2
fi
if ((rc == 124)); then row "device checks" "timed out after 300 s" "-" "FAIL"; fi
status=$rc

note "torch interop"
if "$PY" -c 'import torch' 2>/dev/null; then
  timeout 120 "$PY" "$ROOT/tests/gpu_check_torch.py" "$OUT/libstoker_gpucheck.so" \
    | tee "$OUT/gpu_check_torch.log"
  trc=${PIPESTATUS[0]}
  grep '^RESULT|' "$OUT/gpu_check_torch.log" >>"$RESULTS"
  ((trc == 124)) && row "torch interop" "timed out after 120 s" "-" "FAIL"
  ((trc != 0)) && status=1
else
  row "torch interop" "no torch for $PY" "-" "SKIP"
fi

# --- end to end through the bundled daemon (scripts/gpu-bundle.sh) ---------
# The daemon and stoker-gpu-feed (C++ client) from a bundle built on Debian
# 12 with its own libraries and loader: this machine needs none of them.
G=${STOKER_GPU_BUNDLE:-$ROOT/gpu-bundle}
if [[ -x $G/bin/stokerd && -x $G/bin/stoker-gpu-feed ]]; then
  note "end to end through the bundled stokerd ($G, built at $(cat "$G/COMMIT" 2>/dev/null))"
  E2B=$(mktemp -d /tmp/stkgpub.XXXX)
  W=$(nproc)
  # The daemon's rings live in /dev/shm: 4 slots of a batch of 224x224x3.
  shm_mb=$(($(df -Pk /dev/shm | awk 'NR == 2 {print $4}') / 1024))
  FB=256
  ((shm_mb < 220)) && FB=64
  ((shm_mb < 60)) && FB=16
  row "/dev/shm free" "$shm_mb MiB: end-to-end batches of $FB" "-" "INFO"
  "$G/bin/stokerd" --socket "$E2B/s.sock" --data-root "$G/data" --workers "$W" \
    --index-cache "$E2B/index" --worker-binary "$G/bin/stoker-worker" >"$E2B/stokerd.log" 2>&1 &
  GPID=$!
  wait_serving "$G/bin/stokerctl" "$E2B/s.sock" || row "bundled stokerd" "not SERVING after 20 s" "-" "FAIL"
  # CPU only first: what the daemon's decode gives this machine (about 5 s).
  cpu=$(timeout 120 "$G/bin/stokerctl" consume --socket "$E2B/s.sock" --dataset ds \
    --batch-size "$FB" --epochs $((15 * W)) --json 2>>"$E2B/stokerd.log" | tail -1)
  cpu_rate=$(json_field images_per_s <<<"$cpu")
  feed=$(timeout 150 "$G/bin/stoker-gpu-feed" --socket "$E2B/s.sock" --dataset ds \
    --batch-size "$FB" --seconds 20 --warmup 5 --dtype float16 2>>"$E2B/stokerd.log" | tail -1)
  frc=$?
  echo "cpu only: $cpu"
  echo "into GPU: $feed"
  if [[ -z $cpu_rate || -z $feed ]]; then
    row "end to end, bundled stokerd" "failed (see $E2B/stokerd.log)" "-" "FAIL"
    tail -20 "$E2B/stokerd.log"
    status=1
  else
    rate=$(json_field images_per_s <<<"$feed")
    mode=$(json_field mode <<<"$feed")
    bad=$(json_field mismatches <<<"$feed")
    chk=$(json_field checked_batches <<<"$feed")
    share=$(awk -v a="$rate" -v b="$cpu_rate" 'BEGIN { printf "%.0f", 100 * a / b }')
    verdict=FAIL
    ((share >= 90)) && verdict=PASS
    row "end to end into GPU fp16 NCHW (bundled stokerd, $W workers)" \
      "$rate images/s = $share% of CPU-only consume ($cpu_rate/s); $mode" ">= 90% (decode-bound)" \
      "$verdict"
    if [[ $frc == 0 && $bad == 0 && ${chk:-0} -gt 0 ]]; then
      row "end to end device data vs CPU reference" "$chk batches of $FB, bit-equal" "equal" "PASS"
    else
      row "end to end device data vs CPU reference" "$bad mismatches in $chk batches (exit $frc)" \
        "equal" "FAIL"
      status=1
    fi
    [[ $verdict == PASS && $mode == registered ]] || status=1
  fi
  python_loader "$G" "$E2B/s.sock" "$FB" || status=1
  kill "$GPID" 2>/dev/null
  wait "$GPID" 2>/dev/null
else
  row "end to end, bundled stokerd" "skipped: no $G (make it with scripts/gpu-bundle.sh)" "-" "SKIP"
fi

table
exit "$status"
