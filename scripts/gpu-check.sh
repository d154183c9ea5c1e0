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
#     against the CPU reference; and through the Python loader if
#     STOKER_BUILD_DIR points at a full build usable there.
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
# wait_socket PATH: up to 10 s for a daemon's socket to appear.
wait_socket() { for _ in $(seq 100); do [[ -S $1 ]] && return 0; sleep 0.1; done; return 1; }

table() {
  echo
  echo "stoker GPU check ($(($(date +%s) - START)) s)"
  printf '%-48s %-58s %-22s %s\n' "check" "value" "target" "status"
  printf '%-48s %-58s %-22s %s\n' "-----" "-----" "------" "------"
  while IFS='|' read -r _ name value target status; do
    printf '%-48s %-58s %-22s %s\n' "$name" "$value" "$target" "$status"
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
  -Xcompiler=-fPIC,-Wall,-Wextra,-Wno-unused-parameter -I "$ROOT/client/src")
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

# --- optional: end to end through the daemon --------------------------------
B=${STOKER_BUILD_DIR:-}
if [[ -n $B && -x $B/server/stokerd && -d $B/python/stoker ]]; then
  note "end to end through stokerd ($B)"
  E2E=$(mktemp -d /tmp/stkgpu.XXXX)
  timeout 120 "$PY" "$ROOT/scripts/make_dataset.py" "$E2E/data/ds" --classes 4 \
    --per-class 300 >/dev/null 2>&1
  "$B/server/stokerd" --socket "$E2E/s.sock" --data-root "$E2E/data" \
    --workers "$(nproc)" >"$E2E/stokerd.log" 2>&1 &
  DPID=$!
  wait_socket "$E2E/s.sock"
  timeout 180 env PYTHONPATH="$B/python" "$PY" - "$E2E/s.sock" <<'PYEOF' | tee "$OUT/e2e.log"
import sys, time, torch, stoker
with stoker.Loader("ds", socket=sys.argv[1], batch_size=256, device="cuda", dtype="float16",
                   epochs=None, timeout_ms=60000) as loader:
    conv = torch.nn.Conv2d(3, 16, 3, stride=4).cuda().half()
    it, n, t0 = iter(loader), 0, None
    for i in range(30):
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader); x, y = next(it)
        conv(x).float().mean()
        if i == 4:
            torch.cuda.synchronize(); t0 = time.perf_counter(); n = 0
        elif i > 4:
            n += x.shape[0]
    torch.cuda.synchronize()
    print(f"RESULT|end to end into CUDA tensors (stokerd)|{n / (time.perf_counter() - t0):,.0f} "
          f"images/s, {loader.device_status['mode']}|decode-bound|INFO")
# Images of their own sizes: one copy (and normalize) a sample, padded on the
# device; the same batches on the CPU (normalized by the daemon) must agree.
ops = [{"RandomShortestSize": {"min_size": [96, 128, 160], "max_size": 200}}]
kw = dict(socket=sys.argv[1], batch_size=8, ops=ops, dtype="float32", epochs=1, seed=3,
          pad_to_multiple=32)
with stoker.Loader("ds", device="cuda", **kw) as g, stoker.Loader("ds", **kw) as c:
    worst, k = 0.0, 0
    for (xg, _), (xc, _) in zip(g, c):
        assert xg.is_cuda and xg.shape == xc.shape, (xg.shape, xc.shape)
        worst = max(worst, float((xg.cpu() - xc).abs().max()))
        k += 1
        if k == 10:
            break
    ok = worst <= 1e-5 and g.last_image_sizes == c.last_image_sizes
    print(f"RESULT|any-size batches padded on the device vs CPU|{k} batches, max diff "
          f"{worst:.2e}|<= 1e-5|{'PASS' if ok else 'FAIL'}")
PYEOF
  grep '^RESULT|' "$OUT/e2e.log" >>"$RESULTS" || row "end to end" "failed (see $E2E)" "-" "FAIL"
  kill "$DPID" 2>/dev/null
  wait "$DPID" 2>/dev/null
else
  row "end to end, Python (stokerd)" "skipped: needs a full build (gRPC, Python 3.11); set STOKER_BUILD_DIR" "-" "SKIP"
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
  wait_socket "$E2B/s.sock"
  # CPU only first: what the daemon's decode gives this machine (about 5 s).
  cpu=$(timeout 120 "$G/bin/stokerctl" consume --socket "$E2B/s.sock" --dataset ds \
    --batch-size "$FB" --epochs $((15 * W)) --json 2>>"$E2B/stokerd.log" | tail -1)
  cpu_rate=$(json_field images_per_s <<<"$cpu")
  feed=$(timeout 150 "$G/bin/stoker-gpu-feed" --socket "$E2B/s.sock" --dataset ds \
    --batch-size "$FB" --seconds 20 --warmup 5 --dtype float16 2>>"$E2B/stokerd.log" | tail -1)
  frc=$?
  kill "$GPID" 2>/dev/null
  wait "$GPID" 2>/dev/null
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
else
  row "end to end, bundled stokerd" "skipped: no $G (make it with scripts/gpu-bundle.sh)" "-" "SKIP"
fi

table
exit "$status"
