#!/usr/bin/env bash
# plant.sh DEFECT SOURCE.cu OUT.cu: the CUDA backend's attention kernels with one planted
# defect, for tests/test_cuda_emulation.sh to show the emulation catches it:
#   missing_barrier      the forward kernel reads a key tile without waiting for all of it
#   short_shared_memory  the forward launch asks for 16 bytes less shared memory than it uses
#   unclamped_index      the dK/dV kernel reads the log-sum-exp of rows past the sequence
# Fails unless the edit changes the source exactly once, so a change to the kernels cannot
# turn a demonstration into a test of the unchanged code.
set -eu
defect=$1 src=$2 out=$3
case $defect in
    missing_barrier) edit='s/(\n {8}load_key_tile\(Ks, Vs, base, g, h, j0\);)\n {8}__syncthreads\(\);/$1/g' ;;
    short_shared_memory) edit='s/(static size_t forward_smem\(const Geo& g\) \{\n\s*return sizeof\(float\) \* \(.*?\));/$1 - 16;/gs' ;;
    unclamped_index) edit='s/int i = min\(r0 \+ idx, T - 1\);/int i = r0 + idx;/g' ;;
    *) echo "plant.sh: no defect '$defect'" >&2; exit 1 ;;
esac
count=$(perl -0ne "\$n = ($edit); print \$n || 0" "$src")
if [ "$count" != 1 ]; then
    echo "plant.sh: $defect: the edit matches $src $count times, not once (did the kernel change?)" >&2
    exit 1
fi
perl -0pe "$edit" "$src" >"$out.tmp"
mv "$out.tmp" "$out"
