# normd container: the CPU backend everywhere, the CUDA backend when built on a CUDA base image.
#   docker build -t normd .                                     (CPU)
#   docker build -t normd:cuda --build-arg BASE=nvidia/cuda:13.0.0-devel-ubuntu24.04 \
#                --build-arg RUNTIME_PKGS="libmicrohttpd12t64 libjansson4 curl" .
ARG BASE=debian:bookworm
ARG RUNTIME_PKGS="libmicrohttpd12 libjansson4 curl"
FROM ${BASE} AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential make pkg-config libmicrohttpd-dev libjansson-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make -j"$(nproc)" build/normd

FROM ${BASE}
ARG RUNTIME_PKGS
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ${RUNTIME_PKGS} \
    && rm -rf /var/lib/apt/lists/* && useradd --system --no-create-home normd
COPY --from=build /src/build/normd /usr/local/bin/normd
USER normd
EXPOSE 8000
# In a container the daemon must listen beyond loopback; put it behind the pod network only.
ENV NORMD_LISTEN=0.0.0.0:8000
HEALTHCHECK --interval=10s --timeout=2s CMD curl -fsS http://127.0.0.1:8000/healthz || exit 1
ENTRYPOINT ["/usr/local/bin/normd"]
