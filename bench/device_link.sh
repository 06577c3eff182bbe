#!/usr/bin/env bash
# device_link.sh - on the GPU machine: the GPU tests and the kernel benchmark from what
# `make device-objs` carried (OBJS, default build/carry/objs), linked against the runtime packages
# that bench/device_env.sh unpacked into /tmp/r (source it first). Writes build/tests/gpu_*,
# build/bench/bench_gpu and build/libndkernels.a, where bench/gpu_check.sh (BIN=build) and
# bench/ab_variant.sh (variants of kernel files against that library) look for them.
set -euo pipefail
OBJS=${OBJS:-build/carry/objs}
DEB=${DEB:-/tmp/r/usr/lib/x86_64-linux-gnu}
SYS=/usr/lib/x86_64-linux-gnu
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$(command -v nvcc || echo "$CUDA_HOME/bin/nvcc")}
[ -f "$OBJS/libndkernels.a" ] || { echo "device_link.sh: no $OBJS/libndkernels.a (make device-objs, carry $OBJS)" >&2; exit 1; }
mkdir -p build/tests build/bench
cp "$OBJS/libndkernels.a" build/libndkernels.a
# the shared libraries by file: the runtime packages carry no unversioned .so links
curl=""
for f in "$SYS/libcurl.so.4" "$SYS/libcurl-gnutls.so.4"; do [ -e "$f" ] && { curl=$f; break; }; done
[ -n "$curl" ] || { echo "device_link.sh: no libcurl.so.4 in $SYS" >&2; exit 1; }
libs=("$DEB/libcriterion.so.3" "$curl" "$DEB/libmicrohttpd.so.12" "$DEB/libjansson.so.4" "$SYS/libz.so.1")
for o in "$OBJS"/gpu_*.o; do
    cc "$o" "$OBJS"/util/*.o "$OBJS/libndserver.a" "$OBJS/libndproto.a" "$OBJS/libndkernels.a" \
        -o "build/tests/$(basename "$o" .o)" "${libs[@]}" -L"$CUDA_HOME/lib64" -lcudart_static -ldl -lrt \
        -lstdc++ -pthread -lm
done
"$NVCC" -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 bench/bench_gpu.cu build/libndkernels.a \
    -o build/bench/bench_gpu -lpthread -lm
ls build/tests/gpu_* build/bench/bench_gpu
