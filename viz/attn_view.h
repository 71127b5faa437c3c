// Viewing saved attention maps in a browser (`difftx view`)
#ifndef ATTN_VIEW_H
#define ATTN_VIEW_H

// Writes sample `sample` of the maps file at path as the self-contained page html (plots/view.html
// filled in): every saved layer and head, 8-bit maps deflated and embedded
void attn_view_write(const char* path, int sample, const char* html);

#endif
