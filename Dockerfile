# normd's image: the CPU backend on Debian, or the CUDA backend too when BASE is a CUDA image with
# nvcc. The same Makefile builds both: it builds the CUDA backend when it finds nvcc.
#
#   CPU:   docker build -t normd .
#   CUDA:  docker build -t normd:cuda \
#            --build-arg BASE=nvidia/cuda:13.0.0-devel-ubuntu24.04 \
#            --build-arg RUNTIME_BASE=nvidia/cuda:13.0.0-base-ubuntu24.04 \
#            --build-arg RUNTIME_PKGS="libmicrohttpd12t64 libjansson4 zlib1g curl" .
#          (CUDA_ARCH="-gencode arch=compute_80,code=sm_80 ..." for GPUs other than sm_90.)
#   Run:   docker run -p 8000:8000 normd          (CUDA: add --gpus all)
#
# The CUDA runtime is linked statically, so the runtime stage needs only the driver, which the
# NVIDIA container toolkit mounts; a -base image carries the variables that ask it to.
# `make test-image` builds the CPU image with podman and sends it requests.
ARG BASE=debian:bookworm
ARG RUNTIME_BASE=${BASE}

FROM ${BASE} AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential make pkg-config libmicrohttpd-dev libjansson-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
ARG CUDA_ARCH=
# Objects go outside the source tree: a build/ from the host (were .dockerignore not honoured)
# is never linked in.
RUN make -j"$(nproc)" BUILD=/tmp/build ${CUDA_ARCH:+CUDA_ARCH="$CUDA_ARCH"} /tmp/build/normd \
    && /tmp/build/normd --version

FROM ${RUNTIME_BASE}
ARG RUNTIME_PKGS="libmicrohttpd12 libjansson4 zlib1g curl"
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ${RUNTIME_PKGS} \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin normd
COPY --from=build /tmp/build/normd /usr/local/bin/normd
# Numeric, so that Kubernetes' runAsNonRoot can check it.
USER 10001:10001
EXPOSE 8000
# In a container the daemon must listen beyond loopback (the pod's or the host's network decides
# who reaches it).
ENV NORMD_LISTEN=0.0.0.0:8000
# Beyond loopback normd refuses to start while PUT/DELETE /v1/params are open to anyone who
# reaches the port. An image cannot carry a secret, so it opts in to open admin routes, for
# `docker run` on a trusted network; set NORMD_ADMIN_TOKEN_FILE to a mounted token file (as the
# Kubernetes manifests in deploy/ do) to require a bearer token for them instead.
ENV NORMD_ALLOW_OPEN_ADMIN=1
HEALTHCHECK --interval=10s --timeout=2s --start-period=60s \
    CMD curl -fsS -o /dev/null http://127.0.0.1:8000/v2/health/ready || exit 1
ENTRYPOINT ["/usr/local/bin/normd"]
