// Rendering saved attention maps (`difftx attn`)
#ifndef ATTN_PLOT_H
#define ATTN_PLOT_H

// Renders sample / layer / head of a maps file to png with gnuplot (plots/attn.gp)
void attn_render(const char* path, int sample, int layer, int head, const char* png);

#endif
