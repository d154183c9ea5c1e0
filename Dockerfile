# stokerd as a sidecar container: the daemon, its workers and stokerctl on
# Debian 12, running as an unprivileged user. docker/README.md explains how to
# run it beside a trainer (Compose, Kubernetes) and what it needs:
#
#   docker build -t stoker .                     # BuildKit (Docker's default builder)
#   podman build --format docker -t stoker .     # --format docker keeps the HEALTHCHECK
#   docker run -d --name stoker \
#       -v stoker-sock:/run/stoker -v /srv/datasets:/data:ro stoker
#
# Ring memory: each attached session gets one ring of
#   ring_slots x batch_size x H x W x 3 bytes (uint8; x4 for float32, x2 for float16)
# e.g. 4 slots x 256 x 224 x 224 x 3 = 154 MB per session, anonymous memory
# (a memfd) counted in this container's memory, handed to the trainer over
# the ring socket beside stokerd's socket: no /dev/shm is shared. stokerd
# refuses an Attach whose ring does not fit, naming the size it needs.
#
# The trainer opens the socket, which is created owner-only (0600): run the
# trainer with the same UID (10001 here, or pass --user to both), or give
# stokerd STOKER_SOCKET_MODE=0660 and run both with the same group.

# ---------------------------------------------------------------------------
# Build stage: Debian's -dev packages, and only the three executables (no
# Python module, no CUDA, no tests; Catch2 is installed because CMakeLists.txt
# finds it at configure time).
FROM debian:bookworm-slim AS build

RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      g++ make cmake ninja-build pkg-config ccache \
      libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc \
      libjpeg62-turbo-dev libturbojpeg0-dev libspdlog-dev libcli11-dev catch2 libseccomp-dev \
      libspng-dev libdeflate-dev libwebp-dev libtiff-dev libstb-dev libmicrohttpd-dev \
      libavformat-dev libavcodec-dev libavutil-dev libswscale-dev \
      libhdf5-dev liblmdb-dev \
 && rm -rf /var/lib/apt/lists/*

# Only the folders CMake reads, so that edits to docs, scripts, examples or
# bench do not invalidate the build. tests/ is configured (CMakeLists.txt adds
# it) but not built.
WORKDIR /src
COPY CMakeLists.txt ./
COPY proto proto
COPY common common
COPY pipeline pipeline
COPY server server
COPY client client
COPY tools tools
COPY testing testing
COPY tests tests

# The compiler cache lives in a build-cache mount (BuildKit, buildah), so a
# source edit recompiles only what changed even though this layer is redone;
# the build folder is not kept in the layer (only the stripped executables).
ENV CCACHE_DIR=/ccache CCACHE_MAXSIZE=2G
RUN --mount=type=cache,target=/ccache,id=stoker-ccache \
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
      -DSTOKER_PYTHON=OFF -DSTOKER_CUDA=OFF \
 && cmake --build build -j "$(nproc)" --target stokerd stoker-worker stoker-relay stokerctl \
 && mkdir -p /out \
 && strip -o /out/stokerd build/bin/stokerd \
 && strip -o /out/stoker-worker build/bin/stoker-worker \
 && strip -o /out/stoker-relay build/bin/stoker-relay \
 && strip -o /out/stokerctl build/bin/stokerctl \
 && rm -rf build

# ---------------------------------------------------------------------------
# Runtime stage: the three executables and the Debian runtime libraries they
# link (ldd: gRPC++ and gRPC core with abseil, re2, c-ares and OpenSSL;
# protobuf; libjpeg-turbo, libspng + libdeflate, libwebp, libtiff, stb: the
# image formats; FFmpeg's libavformat, libavcodec, libavutil and libswscale:
# the video clips; libhdf5 and liblmdb: record files, indexed by a worker;
# spdlog with fmt; libseccomp; libmicrohttpd for --metrics-addr), plus tini
# as PID 1.
FROM debian:bookworm-slim

RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 \
      libjpeg62-turbo libspng0 libdeflate0 libwebp7 libwebpdemux2 libtiff6 libstb0 \
      libavformat59 libavcodec59 libavutil57 libswscale6 libhdf5-103-1 liblmdb0 \
      libspdlog1.10 libfmt9 libseccomp2 libmicrohttpd12 tini \
 && rm -rf /var/lib/apt/lists/*

# uid/gid 10001: the trainer container runs as the same user (see above).
# /run/stoker holds the socket; the trainer mounts the same volume.
RUN groupadd --system --gid 10001 stoker \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin stoker \
 && install -d -o stoker -g stoker -m 0750 /run/stoker \
 && install -d -o stoker -g stoker -m 0700 /var/cache/stoker \
 && install -d -m 0755 /data

COPY --from=build /out/stokerd /out/stoker-worker /out/stoker-relay /out/stokerctl /usr/local/bin/
COPY docker/entrypoint.sh /usr/local/bin/stoker-entrypoint

LABEL org.opencontainers.image.title="stokerd" \
      org.opencontainers.image.description="stoker's daemon: decodes and augments image datasets (JPEG, PNG, WebP, TIFF, BMP, PPM) and video clips into shared-memory rings for a trainer beside it" \
      org.opencontainers.image.documentation="docker/README.md" \
      io.stoker.socket="/run/stoker/stoker.sock" \
      io.stoker.data-root="/data" \
      io.stoker.user="10001:10001" \
      io.stoker.ring-memory="each session's ring is this container's memory (a memfd handed over the socket folder; no /dev/shm is shared): ring_slots x batch x H x W x 3 bytes per session (uint8), 4 x 256 x 224x224x3 = 154 MB"

# stokerctl reads STOKER_SOCKET too, so `docker exec stoker stokerctl status` works.
# The image's defaults: the entrypoint runs `stokerd --from-env`, which reads
# STOKER_<NAME> for every flag (proto/stoker/v1/config.proto) not given as an
# argument.
ENV STOKER_SOCKET=/run/stoker/stoker.sock \
    STOKER_DATA_ROOT=/data \
    STOKER_WORKERS=auto \
    STOKER_RESERVE_CPUS=0 \
    STOKER_INDEX_CACHE=/var/cache/stoker \
    STOKER_TRANSCODE_CACHE=/var/cache/stoker/transcode \
    STOKER_PREPARED_CACHE=/var/cache/stoker/prepared

# /var/cache/stoker: dataset indexes, the transcode cache's baseline copies
# (transcode/) and prepared volumes (prepared/), kept across restarts when it
# is a volume.
VOLUME ["/run/stoker", "/data", "/var/cache/stoker"]
USER 10001:10001
WORKDIR /run/stoker

# SERVING only once the workers are up; NOT_SERVING while draining on SIGTERM.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD stokerctl health --socket "$STOKER_SOCKET" >/dev/null || exit 1

# SIGTERM (docker stop): stokerd finishes in-flight batches (--drain-timeout-ms,
# 5 s), tells the clients, removes its rings and socket, and exits 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/stoker-entrypoint"]
CMD []
