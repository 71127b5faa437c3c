#!/usr/bin/env bash
# plant.sh DEFECT SOURCE.cu OUT.cu: the CUDA backend's attention code with one planted
# defect, for tests/test_cuda_emulation.sh to show the emulation catches it:
#   missing_barrier      the forward kernel reads a key tile without waiting for all of it
#   short_shared_memory  the forward launch asks for 16 bytes less shared memory than it uses
#   unclamped_index      the dK/dV kernel reads the log-sum-exp of rows past the sequence
# and, in the host code around cuDNN's graphs (model/cuda/cudnn_attention.cu):
#   cudnn_wrong_stride          the forward graph steps through the queries' rows by the values'
#                               width instead of the qkv row's
#   cudnn_strict_causal         the graphs' mask keeps keys j < i, not j <= i
#   cudnn_missing_minus_lambda  the second map's output gradient is lambda dy, not -lambda dy
#   cudnn_untransposed_ds       the backward's key gradient is dS Q, not dS^T Q
#   cudnn_fp32_output           the forward graph declares O fp32 (an H200's engine computed such
#                               an O wrong; the emulated heuristics offer no engine for it)
# and in the path that writes the maps out (model/cuda/attention_written.cu):
#   written_wrong_stride          the value products step through V's rows by the output's width,
#                                 not the qkv row's
#   written_strict_causal         the softmax keeps keys j < i, not j <= i
#   written_missing_minus_lambda  the second map's output gradient is lambda dy, not -lambda dy
# and, for the golden-lowering test (tests/test_cudnn_graphs.c --golden, in the CUDA build), the
# differences from NVIDIA's frontend that the cuDNN graphs once had, each put back:
#   golden_d_virtual          D = rowsum(dO * O) * 1 stays virtual, not written to memory
#   golden_p_bf16             the backward's P = exp(.) in bf16, not fp32
#   golden_pt_fp32            P^T, dV's operand, in fp32, not bf16
#   golden_dst_fp32           dS^T, dK's operand, in fp32, not bf16
#   golden_mask_before_stats  the backward's causal mask before the statistics are subtracted
#   golden_cmp_float          the mask's comparison computed in FLOAT, not BOOLEAN
#   golden_dp_times_one       a product with 1 after dO V^T (the frontend dropped it in v1.11)
# Fails unless the edit changes the source exactly once, so a change to the kernels cannot
# turn a demonstration into a test of the unchanged code.
set -eu
defect=$1 src=$2 out=$3
case $defect in
    missing_barrier) edit='s/(\n {12}load_key_tile\(Ks, Vs, base, g, h, mp, j0\);)\n {12}__syncthreads\(\);/$1/g' ;;
    short_shared_memory) edit='s/(static size_t forward_smem\(const Geo& g\) \{\n\s*return sizeof\(float\) \* \(.*?\));/$1 - 16;/gs' ;;
    unclamped_index) edit='s/int i = min\(r0 \+ idx, T - 1\);/int i = r0 + idx;/g' ;;
    cudnn_wrong_stride) edit='s/(q_strides\[4\] = \{x->T \* x->QKV, x->hq, )x->QKV(, 1\};\n    int64_t kt_dims)/$1x->Dv$2/g' ;;
    cudnn_strict_causal) edit='s/pointwise\(g, CUDNN_POINTWISE_CMP_GE, row, col/pointwise(g, CUDNN_POINTWISE_CMP_GT, row, col/g' ;;
    cudnn_missing_minus_lambda) edit='s/__float2bfloat16_rn\(-lam \* dy\[i\]\)/__float2bfloat16_rn(lam * dy[i])/g' ;;
    cudnn_untransposed_ds) edit='s/matmul\(g, dst, q, dk\)/matmul(g, ds, q, dk)/g' ;;
    cudnn_fp32_output) edit='s/Desc o = tensor\(g, T_O, CUDNN_DATA_BFLOAT16, v_dims, o_strides, 0, 0\);\n    Desc stats/Desc o = tensor(g, T_O, CUDNN_DATA_FLOAT, v_dims, o_strides, 0, 0);\n    Desc stats/g' ;;
    written_wrong_stride) edit='s/(g\.Dv, g\.T, g\.T, 1\.0f, )g\.QKV(, g\.T, beta, g\.HDv\);)/$1g.HDv$2/g' ;;
    written_strict_causal) edit='s/visible = g\.q0 \+ r \+ 1, T = g\.T;/visible = g.q0 + r, T = g.T;/g' ;;
    written_missing_minus_lambda) edit='s/G\[n \+ i\] = narrow<TP>\(-lam \* dy\[i\]\);/G[n + i] = narrow<TP>(lam * dy[i]);/g' ;;
    golden_d_virtual) edit='s/Desc d_rows = tensor\(g, T_D, CUDNN_DATA_FLOAT, row_dims, row_strides, 0, 0\);/Desc d_rows = temp(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, 1);/g' ;;
    golden_p_bf16) edit='s/(centred = temp\(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, x->T\), p = temp\(g, CUDNN_DATA_)FLOAT/${1}BFLOAT16/g' ;;
    golden_pt_fp32) edit='s/Desc pt = tensor\(g, g->next_virtual\+\+, CUDNN_DATA_BFLOAT16/Desc pt = tensor(g, g->next_virtual++, CUDNN_DATA_FLOAT/g' ;;
    golden_dst_fp32) edit='s/Desc dst = tensor\(g, g->next_virtual\+\+, CUDNN_DATA_BFLOAT16/Desc dst = tensor(g, g->next_virtual++, CUDNN_DATA_FLOAT/g' ;;
    golden_mask_before_stats) edit='s/pointwise\(g, CUDNN_POINTWISE_SUB, scaled_logits\(g, x, q, kt, scale\), stats, centred, NULL, 0\);\n(\s*)pointwise\(g, CUDNN_POINTWISE_EXP, causal_mask\(g, x, centred, neg_inf\), NULL, p, NULL, 0\);/pointwise(g, CUDNN_POINTWISE_SUB, causal_mask(g, x, scaled_logits(g, x, q, kt, scale), neg_inf), stats, centred, NULL, 0);\n${1}pointwise(g, CUDNN_POINTWISE_EXP, centred, NULL, p, NULL, 0);/g' ;;
    golden_cmp_float) edit='s/mode == CUDNN_POINTWISE_CMP_GE \? CUDNN_DATA_BOOLEAN : CUDNN_DATA_FLOAT/CUDNN_DATA_FLOAT/g' ;;
    golden_dp_times_one) edit='s/pointwise\(g, CUDNN_POINTWISE_SUB, dp, d_rows, diff, NULL, 0\);/Desc kept = temp(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, x->T); pointwise(g, CUDNN_POINTWISE_MUL, dp, unit, kept, NULL, 0); pointwise(g, CUDNN_POINTWISE_SUB, kept, d_rows, diff, NULL, 0);/g' ;;
    *) echo "plant.sh: no defect \'$defect'" >&2; exit 1 ;;
esac
count=$(perl -0ne "\$n = ($edit); print \$n || 0" "$src")
if [ "$count" != 1 ]; then
    echo "plant.sh: $defect: the edit matches $src $count times, not once (did the kernel change?)" >&2
    exit 1
fi
perl -0pe "$edit" "$src" >"$out.tmp"
mv "$out.tmp" "$out"
