#!/usr/bin/env bash
# make gpu-bundle: OUT holds the CUDA build's programs (bin/); every shared library they load
# except glibc, the GPU driver and CUDA's own libraries (which a GPU machine has), in
# lib.tar.gz (gzip, which every machine has, unlike xz; OpenBLAS's kernels for every CPU alone
# take 35 MiB; gpu-check.sh unpacks them into its working folder); the bench recipes and
# PyTorch script; gpu-check.sh. Written as OUT.tmp and renamed.
# OUT and the programs are read from where the command is run; OUT (and OUT.tmp) is replaced only
# when it is absent, empty or a bundle this script made (it holds the file .gpu-bundle).
# usage: tests/make_gpu_bundle.sh OUT PROGRAM...
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: tests/make_gpu_bundle.sh OUT PROGRAM..." >&2
    exit 2
fi
absolute() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
out=$(absolute "$1")
shift
programs=()
for p in "$@"; do programs+=("$(absolute "$p")"); done
ours() {  # a folder this script may replace: absent, empty or a bundle (marked, or of the
          # shape bundles had before the mark)
    [ ! -e "$1" ] && [ ! -L "$1" ] && return 0
    [ -d "$1" ] && [ ! -L "$1" ] || return 1
    [ -e "$1/.gpu-bundle" ] || [ -z "$(ls -A "$1")" ] || { [ -f "$1/COMMIT" ] && [ -f "$1/gpu-check.sh" ] && [ -f "$1/lib.tar.gz" ]; }
}
for d in "$out" "$out.tmp"; do
    ours "$d" || { echo "error: '$d' exists and is not a GPU bundle this script made (no .gpu-bundle in it): choose another OUT" >&2; exit 1; }
done
cd "$(dirname "$0")/.."
rm -rf "$out.tmp"
mkdir -p "$out.tmp/bin" "$out.tmp/lib" "$out.tmp/experiments"
touch "$out.tmp/.gpu-bundle"
cp "${programs[@]}" "$out.tmp/bin/"
# glibc's parts, the driver, and the CUDA toolkit's libraries stay behind
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libcuda\.so|libnvidia-|libcudart\.so|libcublas\.so|libcublasLt\.so|libnccl\.so)'
for p in "${programs[@]}"; do
    ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
    [[ $name =~ $skip ]] || cp -L "$path" "$out.tmp/lib/$name"
done
tar -C "$out.tmp" -czf "$out.tmp/lib.tar.gz" lib
rm -rf "$out.tmp/lib"
cp experiments/bench_standard.ini experiments/bench_diff.ini experiments/default.ini "$out.tmp/experiments/"
cp tests/ranks_check.sh "$out.tmp/"
mkdir -p "$out.tmp/tests/gpus"
cp tests/gpus/*.json "$out.tmp/tests/gpus/"  # test_cudnn_graphs' described GPUs, read from the bundle's folder
cp tests/bench_torch_gpu.py tests/sdpa_cudnn.py "$out.tmp/"
cp tests/gpu-check.sh "$out.tmp/gpu-check.sh"
git describe --always --dirty --abbrev=12 >"$out.tmp/COMMIT" 2>/dev/null || echo unknown >"$out.tmp/COMMIT"
rm -rf "$out"
mv "$out.tmp" "$out"
size=$(du -sm "$out" | cut -f1)
echo "gpu bundle: $out, $size MiB ($(tar -tzf "$out/lib.tar.gz" | grep -c '\.so') libraries); on a GPU machine: $out/gpu-check.sh"
[ "$size" -lt 60 ] || { echo "gpu bundle: $size MiB, over the 60 MiB it must stay under" >&2; exit 1; }
