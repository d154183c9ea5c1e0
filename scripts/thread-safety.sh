#!/usr/bin/env bash
# Checks the lock annotations (absl's ABSL_GUARDED_BY and friends on the
# engine's mutex and the dataset registry's) with clang's thread-safety
# analysis: every .cc under server/ (all its folders), common/, pipeline/
# and client/src/ (the client, its CUDA copier), tests aside, is compiled with -fsyntax-only -Wthread-safety
# -Werror (no code generated), using the include paths and defines CMake
# wrote into the build's compile_commands.json (gcc's warning flags are left
# out: clang's analysis is what is asked here). Needs a configured and built
# build dir (for the generated protobuf headers). Takes well under a minute.
#
#   scripts/thread-safety.sh [BUILD_DIR]     (default build/)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
dir=${1:-build}
STOKER_PACKAGES+=("${STOKER_FUZZ_PACKAGES[@]}")
stoker_ensure_packages
clang=$(command -v clang++-14 || command -v clang++ || true)
if [[ -z $clang ]]; then
  echo "thread-safety.sh: no clang++ found" >&2
  exit 1
fi
if [[ ! -f $dir/compile_commands.json ]]; then
  echo "thread-safety.sh: $dir/compile_commands.json is missing (configure and build first)" >&2
  exit 1
fi
t0=$SECONDS
/usr/bin/python3 - "$dir/compile_commands.json" "$PWD" "$clang" "$(nproc)" <<'PY'
import concurrent.futures, json, os, shlex, subprocess, sys

db, root, clang, jobs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
folders = tuple(os.path.join(root, d) + os.sep
                for d in ("server", "common", "pipeline", os.path.join("client", "src")))
units = {}
for e in json.load(open(db)):
    f = os.path.normpath(os.path.join(e["directory"], e["file"]))
    if not f.startswith(folders) or not f.endswith(".cc") or f.endswith("_test.cc") or f in units:
        continue
    args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
    keep, i = [], 1
    while i < len(args):
        a = args[i]
        if a in ("-I", "-D", "-isystem", "-include") and i + 1 < len(args):
            keep += [a, args[i + 1]]
            i += 2
            continue
        if a.startswith(("-D", "-I", "-std=", "-isystem")) or a == "-pthread":
            keep.append(a)
        i += 1
    units[f] = (e["directory"], keep)
if len(units) < 50:
    sys.exit(f"thread-safety.sh: only {len(units)} sources of server/, common/, pipeline/, client/src/ in {db}")
print(f"==> clang thread-safety analysis over {len(units)} sources of server/, common/, "
      f"pipeline/, client/src/ ({clang})", flush=True)

def check(item):
    f, (cwd, flags) = item
    cmd = [clang, "-fsyntax-only", "-Wthread-safety", "-Werror", *flags, f]
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    return f, r.returncode, r.stdout + r.stderr

failed = 0
with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
    for f, rc, out in ex.map(check, sorted(units.items())):
        if rc != 0:
            failed += 1
            print(f"FAILED: {os.path.relpath(f)}\n{out}", flush=True)
if failed:
    sys.exit(f"thread-safety.sh: {failed} of {len(units)} sources failed")
print(f"==> all {len(units)} pass")
PY
echo "==> thread-safety.sh took $((SECONDS - t0)) s"
