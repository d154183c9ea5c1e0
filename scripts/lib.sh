# Shared by scripts/test.sh, scripts/demo.sh and bench/run.sh: install what
# stoker needs from Debian 12's packages, then configure and build.

STOKER_PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libjpeg62-turbo-dev libturbojpeg0-dev libjpeg-turbo-progs
  libspng-dev libdeflate-dev libwebp-dev libtiff-dev libstb-dev webp libtiff-tools libmicrohttpd-dev
  libspdlog-dev libcli11-dev catch2 pybind11-dev libseccomp-dev
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev ffmpeg python3-av
  python3 python3-dev python3-pytest python3-numpy python3-pil
  python3-pip python3-venv python3-setuptools python3-wheel
  python3-torch python3-torchvision python3-matplotlib python3-prometheus-client
  python3-nibabel python3-scipy
  libhdf5-dev liblmdb-dev python3-h5py python3-lmdb
  python3-grpcio openssl iproute2 python3-kubernetes python3-yaml
  time
  procps
)
# --- sanitizers and fuzzing: scripts/fuzz.sh adds these (clang + libFuzzer) ---
STOKER_FUZZ_PACKAGES=(clang-14 libclang-rt-14-dev)
# --- end sanitizers and fuzzing ---

# Installs the packages above that are missing (as root; otherwise says
# what to run).
stoker_ensure_packages() {
  local missing=()
  for p in "${STOKER_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  echo "==> installing ${#missing[@]} Debian package(s): ${missing[*]}"
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then sudo=(sudo); else
      echo "run as root: apt-get install -y ${missing[*]}" >&2; return 1
    fi
  fi
  "${sudo[@]}" apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends \
    "${missing[@]}" >/dev/null
}

# The compiler cache for every build here (build/, build-asan/, build-fuzz/):
# keyed by content, with paths taken relative to the checkout, so a fresh
# clone elsewhere (CI) reuses what an earlier build on this machine compiled.
# A cold cache only costs its misses.
stoker_ccache_env() {
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=true
  export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/stoker-ccache}
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-6G}
}
stoker_ccache_args() {
  command -v ccache >/dev/null &&
    echo -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
      -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache
  return 0
}

# stoker_build DIR [cmake args...]: configure (once) and build.
stoker_build() {
  local dir=$1; shift
  local jobs; jobs=$(nproc)
  stoker_ccache_env
  if [[ ! -f $dir/build.ninja ]]; then
    # shellcheck disable=SC2046
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(stoker_ccache_args) "$@"
  fi
  cmake --build "$dir" -j "$jobs"
}
