#!/usr/bin/env bash
# device_link.sh - on the GPU machine: the GPU tests and the kernel benchmark from what
# `make device-objs` carried (OBJS, default build/carry/objs), linked against the runtime packages
# that bench/device_env.sh unpacked into /tmp/r (source it first). Writes build/tests/gpu_*,
# build/bench/bench_gpu and build/libndkernels.a, where bench/gpu_check.sh (BIN=build) and
# bench/ab_variant.sh (variants of kernel files against that library) look for them.
#
#   bench/device_link.sh            the tests and the benchmark against the carried library
#   bench/device_link.sh VARIANT    the tests only, against build/ab/VARIANT/libndkernels.a
#                                   (bench/ab_variant.sh VARIANT ...), as build/tests/gpu_*_VARIANT
#
# TEST_OBJS: where the tests' gpu_*.o are (default OBJS; say a test object compiled since `make
# device-objs`, carried in a folder of its own).
set -euo pipefail
OBJS=${OBJS:-build/carry/objs}
TEST_OBJS=${TEST_OBJS:-$OBJS}
variant=${1:-}
DEB=${DEB:-/tmp/r/usr/lib/x86_64-linux-gnu}
SYS=/usr/lib/x86_64-linux-gnu
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$(command -v nvcc || echo "$CUDA_HOME/bin/nvcc")}
[ -f "$OBJS/libndkernels.a" ] || { echo "device_link.sh: no $OBJS/libndkernels.a (make device-objs, carry $OBJS)" >&2; exit 1; }
klib=$OBJS/libndkernels.a suffix=""
if [ -n "$variant" ]; then
    klib=build/ab/$variant/libndkernels.a suffix=_$variant
    [ -f "$klib" ] || { echo "device_link.sh: no $klib (bench/ab_variant.sh $variant ...)" >&2; exit 1; }
fi
mkdir -p build/tests build/bench
# written aside and renamed, so a bench/ab_variant.sh copying it meanwhile reads a whole archive
if [ -z "$variant" ]; then
    cp "$OBJS/libndkernels.a" build/libndkernels.a.part && mv build/libndkernels.a.part build/libndkernels.a
fi
# the shared libraries by file: the runtime packages carry no unversioned .so links
curl=""
for f in "$SYS/libcurl.so.4" "$SYS/libcurl-gnutls.so.4"; do [ -e "$f" ] && { curl=$f; break; }; done
[ -n "$curl" ] || { echo "device_link.sh: no libcurl.so.4 in $SYS" >&2; exit 1; }
libs=("$DEB/libcriterion.so.3" "$curl" "$DEB/libmicrohttpd.so.12" "$DEB/libjansson.so.4" "$SYS/libz.so.1")
for o in "$TEST_OBJS"/gpu_*.o; do
    cc "$o" "$OBJS"/util/*.o "$OBJS/libndserver.a" "$OBJS/libndproto.a" "$klib" \
        -o "build/tests/$(basename "$o" .o)$suffix" "${libs[@]}" -L"$CUDA_HOME/lib64" -lcudart_static \
        -ldl -lrt -lstdc++ -pthread -lm
done
if [ -n "$variant" ]; then
    ls build/tests/gpu_*"$suffix"
    exit 0
fi
"$NVCC" -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 bench/bench_gpu.cu build/libndkernels.a \
    -o build/bench/bench_gpu -lpthread -lm
ls build/tests/gpu_* build/bench/bench_gpu
