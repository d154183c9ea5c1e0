#!/usr/bin/env bash
# Packs stokerd, its worker, stokerctl and stoker-gpu-feed with every shared
# library they load (Debian 12's glibc and its loader included) and a small
# JPEG dataset into one folder, for a GPU machine that has none of stoker's
# Debian libraries. scripts/gpu-check.sh finds it at ./gpu-bundle (or
# $STOKER_GPU_BUNDLE) and then measures end to end through the daemon into
# GPU memory. The folder is git-ignored; the device tool carries it:
#
#   scripts/gpu-bundle.sh                 # build/ (with CUDA) -> gpu-bundle/
#   run(command="bash scripts/gpu-check.sh", carry=["gpu-bundle"])
#
# py.tar.gz holds what the device's own Python needs to build stoker._native
# there (its pybind11 and Python headers, not Debian's: NumPy 2 needs pybind11
# >= 2.12): the static libraries of the C++ client and the headers that
# client/python/stoker_native.cc includes beyond pybind11, Python and the
# standard library. scripts/gpu-check.sh compiles and links it against lib/.
#
# Each bin/ entry is a shell script that runs the real binary (libexec/)
# through the bundled loader with the bundled libraries first, then
# $LD_LIBRARY_PATH and the usual driver folders (for libcuda.so.1, which
# comes from the machine's driver and is not bundled).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${1:-$ROOT/gpu-bundle}
BUILD=${STOKER_BUILD_DIR:-$ROOT/build}
LIMIT_MB=60 # the device tool carries 64 MiB in all

source scripts/lib.sh
stoker_ensure_packages
stoker_build "$BUILD" >/dev/null
if [[ ! -x $BUILD/bin/stoker-gpu-feed ]]; then
  echo "gpu-bundle: $BUILD has no stoker-gpu-feed: it needs a CUDA toolkit at configure time" >&2
  exit 1
fi

rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/libexec" "$OUT/lib" "$OUT/data"
# The worker is the images-only one (server/worker/video_work.h): FFmpeg
# and what its libraries need are over 150 MiB, more than the device tool
# carries; the bundle serves images.
bins=("$BUILD/bin/stokerd" "$BUILD/bin/stoker-worker-images" "$BUILD/bin/stokerctl"
  "$BUILD/bin/stoker-gpu-feed")
bundled_name() { local n; n=$(basename "$1"); echo "${n%-images}"; }
for b in "${bins[@]}"; do
  strip --strip-unneeded -o "$OUT/libexec/$(bundled_name "$b")" "$b"
done

# The shared libraries, resolved to their files, under their sonames; glibc's
# compatibility stubs too (the driver's libcuda.so.1 may ask for them).
loader=""
while read -r so path; do
  [[ -n $path && -e $path ]] || continue
  cp -L "$path" "$OUT/lib/$so"
  [[ $so == ld-linux-x86-64.so.2 ]] && loader=$so
done < <(
  for b in "${bins[@]}"; do ldd "$b"; done |
    awk '$2 == "=>" && $3 ~ /^\// {print $1, $3} $1 ~ /^\/.*ld-linux/ {n=split($1, p, "/"); print p[n], $1}' |
    sort -u
)
for stub in libdl.so.2 libpthread.so.0 librt.so.1 libm.so.6; do
  [[ -e $OUT/lib/$stub ]] || cp -L "/lib/x86_64-linux-gnu/$stub" "$OUT/lib/$stub"
done
if [[ -z $loader ]]; then
  echo "gpu-bundle: no ld-linux-x86-64.so.2 in the ldd output" >&2
  exit 1
fi
strip --strip-unneeded "$OUT"/lib/*.so* 2>/dev/null || true

for b in "${bins[@]}"; do
  name=$(bundled_name "$b")
  cat >"$OUT/bin/$name" <<EOF
#!/bin/sh
# $name from the stoker GPU bundle (scripts/gpu-bundle.sh).
B=\$(dirname "\$(dirname "\$(readlink -f "\$0")")")
P="\$B/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}:/usr/local/nvidia/lib64:/usr/lib/x86_64-linux-gnu:/usr/lib64:/lib64"
exec "\$B/lib/$loader" --library-path "\$P" "\$B/libexec/$name" "\$@"
EOF
  chmod +x "$OUT/bin/$name"
done

# The Python module's ingredients (see the top).
PY=$(mktemp -d)
mkdir -p "$PY/include" "$PY/lib"
c++ -std=c++20 -M -I . -I client/src -I client/include -I proto -I "$BUILD/proto/gen" \
  -isystem "$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
  client/python/stoker_native.cc | tr ' \\' '\n\n' |
  sed -n -e "s|^/usr/include/\(absl/.*\)|/usr/include \1|p" \
    -e "s|^/usr/include/\(google/.*\)|/usr/include \1|p" \
    -e "s|^$BUILD/proto/gen/\(.*\)|$BUILD/proto/gen \1|p" | sort -u |
  while read -r dir rel; do
    mkdir -p "$PY/include/$(dirname "$rel")"
    cp "$dir/$rel" "$PY/include/$rel"
  done
for a in client/libstoker_client.a common/libstoker_common.a pipeline/libstoker_pipeline_spec.a \
  server/image/libstoker_op_names.a \
  server/control/libstoker_config.a proto/libstoker_proto.a \
  client/libstoker_cuda.a; do
  strip -g -o "$PY/lib/$(basename "$a")" "$BUILD/$a"
done
tar -C "$PY" -czf "$OUT/py.tar.gz" include lib
rm -rf "$PY"

/usr/bin/python3 scripts/make_dataset.py "$OUT/data/ds" --classes 4 --per-class 80 \
  --min-size 256 --max-size 400 >/dev/null
git -C "$ROOT" rev-parse --short HEAD >"$OUT/COMMIT" 2>/dev/null || echo unknown >"$OUT/COMMIT"

# It must run here, with nothing but the bundle.
"$OUT/bin/stokerd" --version >/dev/null
mb=$(du -sm "$OUT" | cut -f1)
echo "gpu-bundle: $OUT ($mb MiB: $(ls "$OUT/lib" | wc -l) libraries, 320 JPEGs, py.tar.gz)"
if ((mb > LIMIT_MB)); then
  echo "gpu-bundle: over $LIMIT_MB MiB, too big to carry" >&2
  exit 1
fi
