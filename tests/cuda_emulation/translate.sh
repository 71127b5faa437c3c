#!/usr/bin/env bash
# translate.sh SOURCE.cu OUT.cc: a CUDA source as C++ for the CPU emulation (cuda_runtime.h),
# the kernels unchanged. Two things a C++ compiler cannot read are mapped:
#   kernel<<<grid, block[, smem]>>>(args)  ->  emu_launch(kernel, "kernel", __FILE__, __LINE__, grid, block[, smem])(args)
#     (kernel may name one template argument: kernel<float>)
#   extern __shared__ T name[];            ->  T* name = the launch's dynamic shared memory
#   __shared__ T name[N];                  ->  T* name = an array of N of this declaration's own
# Fails when anything of either form is left, so a construct this does not know cannot slip
# through untranslated.
set -eu
src=$1 out=$2
tmp="$out.tmp"
{
    printf '#line 1 "%s"\n' "$src"
    perl -pe '
        s/\b(\w+(?:<\w+>)?)<<<(.*?)>>>\(/emu_launch($1, "$1", __FILE__, __LINE__, $2)(/g;
        s/\bextern __shared__ (\w+) (\w+)\[\];/$1* $2 = emu_dynamic_shared<$1>();/g;
        s/\b__shared__ (\w+) (\w+)\[([^\]]+)\];/static char emu_key_$2; $1* $2 = emu_static_shared<$1>($3, &emu_key_$2, "$2");/g;
    ' "$src"
} >"$tmp"
if grep -nE '<<<|>>>|__shared__' "$tmp" | grep -v '^1:'; then
    echo "translate.sh: $src: a launch or __shared__ declaration of a form it does not know (above)" >&2
    rm -f "$tmp"
    exit 1
fi
mv "$tmp" "$out"
