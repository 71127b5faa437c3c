#!/usr/bin/env bash
# make gpu-bundle: OUT holds the CUDA build's programs (bin/); every shared library they load
# except glibc, the GPU driver and CUDA's own libraries (which a GPU machine has), in
# lib.tar.gz (gzip, which every machine has, unlike xz; OpenBLAS's kernels for every CPU alone
# take 35 MiB; gpu-check.sh unpacks them into its working folder); the bench recipes and
# PyTorch script; gpu-check.sh. Written into a new folder of its own beside OUT (mktemp) and
# renamed. OUT and the programs are read from where the command is run; OUT is replaced only when
# it is absent, empty or a bundle this script made (it holds the file .gpu-bundle).
# usage: tests/make_gpu_bundle.sh OUT PROGRAM...
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: tests/make_gpu_bundle.sh OUT PROGRAM..." >&2
    exit 2
fi
absolute() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
out=$(absolute "$1")
while [ "${#out}" -gt 1 ] && [ "${out%/}" != "$out" ]; do out=${out%/}; done  # B1/ is the folder B1
shift
programs=()
for p in "$@"; do programs+=("$(absolute "$p")"); done
ours() {  # a folder this script may replace: absent, empty or a bundle (marked, or of the
          # shape bundles had before the mark)
    [ ! -e "$1" ] && [ ! -L "$1" ] && return 0
    [ -d "$1" ] && [ ! -L "$1" ] || return 1
    [ -e "$1/.gpu-bundle" ] || [ -z "$(ls -A "$1")" ] || { [ -f "$1/COMMIT" ] && [ -f "$1/gpu-check.sh" ] && [ -f "$1/lib.tar.gz" ]; }
}
ours "$out" || { echo "error: '$out' exists and is not a GPU bundle this script made (no .gpu-bundle in it): choose another OUT" >&2; exit 1; }
cd "$(dirname "$0")/.."
mkdir -p "$(dirname "$out")"
# the new bundle is written into a folder of this run's own beside OUT (never an existing path)
# and put in OUT's place at the end; an interrupted run leaves only that folder
tmp=$(mktemp -d "$(dirname "$out")/.$(basename "$out").XXXXXX")
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
mkdir -p "$tmp/bin" "$tmp/lib" "$tmp/experiments"
touch "$tmp/.gpu-bundle"
cp "${programs[@]}" "$tmp/bin/"
# glibc's parts, the driver, and the CUDA toolkit's libraries stay behind
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libcuda\.so|libnvidia-|libcudart\.so|libcublas\.so|libcublasLt\.so|libnccl\.so)'
for p in "${programs[@]}"; do
    ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
    [[ $name =~ $skip ]] || cp -L "$path" "$tmp/lib/$name"
done
tar -C "$tmp" -czf "$tmp/lib.tar.gz" lib
rm -rf "$tmp/lib"
cp experiments/bench_standard.ini experiments/bench_diff.ini experiments/default.ini "$tmp/experiments/"
cp tests/ranks_check.sh "$tmp/"
mkdir -p "$tmp/tests/gpus"
cp tests/gpus/*.json "$tmp/tests/gpus/"  # test_cudnn_graphs' described GPUs, read from the bundle's folder
cp tests/bench_torch_gpu.py tests/sdpa_cudnn.py "$tmp/"
cp tests/gpu-check.sh "$tmp/gpu-check.sh"
git describe --always --dirty --abbrev=12 >"$tmp/COMMIT" 2>/dev/null || echo unknown >"$tmp/COMMIT"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
size=$(du -sm "$out" | cut -f1)
echo "gpu bundle: $out, $size MiB ($(tar -tzf "$out/lib.tar.gz" | grep -c '\.so') libraries); on a GPU machine: $out/gpu-check.sh"
[ "$size" -lt 60 ] || { echo "gpu bundle: $size MiB, over the 60 MiB it must stay under" >&2; exit 1; }
