#!/usr/bin/env bash
# ab_variant.sh - a bench_gpu built against the kernels library with one kernel file compiled
# differently, for A/B runs of kernel knobs on the GPU machine (bench/ab_rounds.sh runs them).
#
#   bench/ab_variant.sh NAME FILE.cu[,FILE.cu...] [NVCC FLAGS...]
#
# Copies $(BUILD)/libndkernels.a (make it first), compiles each FILE.cu with the Makefile's nvcc
# flags plus the given ones (for example -DND_AXIS_SLAB=0), puts the objects in the copy under the
# names of the kernel files they replace (the library's member for kernels/NAME.cu is NAME.o),
# links bench/bench_gpu.cu against it and writes $(BUILD)/ab/bench_gpu_NAME (stripped; the device
# code is most of its size). Several files (a knob in a shared header, e.g. rows_split.cuh, is
# compiled into every row op) are compiled in parallel. One FILE.cu may be an older copy of a
# kernel file: KERNEL=softmax_axis names the member it replaces when FILE.cu's own name differs.
# A FILE.o is an object compiled elsewhere (the same flags; say on a machine without a GPU, to
# save the GPU machine's time): it goes into the copy as is, and NVCC FLAGS do not apply to it.
# Compiled for the GPU machine alone it may leave out the PTX (-gencode arch=compute_90,code=sm_90
# only: LayerNorm's object 7 MB instead of 10), so that more variants fit in what a call carries.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,17p' "$0" >&2; exit 2; }
name=$1 srcs=$2
shift 2
BUILD=${BUILD:-build}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
FLAGS="-O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 -lineinfo"
[ -f "$BUILD/libndkernels.a" ] || { echo "ab_variant.sh: no $BUILD/libndkernels.a (make first)" >&2; exit 1; }
dir=$BUILD/ab/$name
mkdir -p "$dir"
cp "$BUILD/libndkernels.a" "$dir/libndkernels.a"
members=()
IFS=, read -ra files <<< "$srcs"
for src in "${files[@]}"; do
    base=$(basename "$src"); base=${base%.cu}; base=${base%.o}
    member=$base.o
    [ ${#files[@]} -eq 1 ] && member=${KERNEL:-$base}.o
    ar t "$BUILD/libndkernels.a" | grep -qx "$member" ||
        { echo "ab_variant.sh: $BUILD/libndkernels.a has no member $member (KERNEL=...)" >&2; exit 1; }
    members+=("$member")
    if [[ $src == *.o ]]; then
        cp "$src" "$dir/$member" &
    else
        # shellcheck disable=SC2086
        "$NVCC" $FLAGS -Ikernels "$@" -c "$src" -o "$dir/$member" &
    fi
done
for _ in "${files[@]}"; do wait -n || { echo "ab_variant.sh: a compile failed" >&2; exit 1; }; done
(cd "$dir" && ar r libndkernels.a "${members[@]}")
# shellcheck disable=SC2086
"$NVCC" $FLAGS bench/bench_gpu.cu "$dir/libndkernels.a" -o "$dir/bench_gpu" -lpthread -lm
strip -o "$BUILD/ab/bench_gpu_$name" "$dir/bench_gpu"
echo "$BUILD/ab/bench_gpu_$name"
