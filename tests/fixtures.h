// A small synthetic corpus for tests that need prepared data.
#ifndef FIXTURES_H
#define FIXTURES_H

#include <stdio.h>

#include "../model/util.h"

// n_docs files dir/docNN.txt of 40 short lines each
static inline void write_test_corpus(const char* dir, int n_docs) {
    mkdir_p(dir);
    char path[256];
    for (int d = 0; d < n_docs; d++) {
        snprintf(path, sizeof(path), "%s/doc%02d.txt", dir, d);
        FILE* f = fopenCheck(path, "w");
        for (int i = 0; i < 40; i++) fprintf(f, "Document %d says line %d of the little corpus.\n", d, i);
        fcloseCheck(f, path);
    }
}

#endif
