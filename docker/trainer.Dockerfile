# An example trainer image for docker/compose.yaml: Debian's python3-torch,
# the stoker Python module, and examples/consume.py as the "training loop".
# Build from the repository root:
#
#   docker build -f docker/trainer.Dockerfile -t stoker-trainer-example .
#   podman build --pull=never -f docker/trainer.Dockerfile -t stoker-trainer-example .
#
# Debian 12's torch is CPU-only: this image shows the wiring (user, socket,
# /dev/shm, PYTHONPATH), not a GPU trainer. In your own trainer image, build
# the module the same way against the image's Python and copy build/python in
# (the module needs the gRPC++ and protobuf runtime libraries; see below).

FROM debian:bookworm-slim AS build
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      g++ make cmake ninja-build pkg-config ccache \
      libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc \
      libjpeg62-turbo-dev libturbojpeg0-dev libspdlog-dev libcli11-dev catch2 libseccomp-dev \
      python3-dev pybind11-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY proto proto
COPY server server
COPY client client
COPY tests tests
ENV CCACHE_DIR=/ccache CCACHE_MAXSIZE=2G
RUN --mount=type=cache,target=/ccache,id=stoker-ccache \
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
      -DSTOKER_PYTHON=ON -DSTOKER_CUDA=OFF \
 && cmake --build build -j "$(nproc)" --target _native \
 && mkdir -p /out \
 && cp -r build/python /out/python \
 && strip --strip-unneeded /out/python/stoker/_native*.so \
 && rm -rf build

FROM debian:bookworm-slim
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      python3 python3-numpy python3-torch \
      libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 \
 && rm -rf /var/lib/apt/lists/*
# The same user as the sidecar: the socket and the rings are owner-only.
RUN groupadd --system --gid 10001 trainer \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin trainer
COPY --from=build /out/python /opt/stoker/python
COPY examples/consume.py /opt/stoker/examples/consume.py
ENV PYTHONPATH=/opt/stoker/python \
    STOKER_SOCKET=/run/stoker/stoker.sock
USER 10001:10001
ENTRYPOINT ["/usr/bin/python3", "/opt/stoker/examples/consume.py", "--socket", "/run/stoker/stoker.sock"]
CMD ["--dataset", "demo", "--epochs", "2"]
