/*
 * test_loader_corpus.c — every file of tests/fuzz/corpus-model/ (the model loader's fuzz
 * seeds, scripts/gen_model_corpus.py, plus any crasher the fuzzer found, kept once fixed)
 * through locks_model_load, under ASan in `make test`. ok-<arch>-<type>.gguf must load,
 * as that architecture, with every weight row readable (fp32 rows finite: the seeds'
 * scales are finite); any other file must load or be refused, never crash.
 */
#include "test_util.h"

#include <dirent.h>

#include "model/llama_internal.h"

#define CORPUS "tests/fuzz/corpus-model"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void check_file(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", CORPUS, name);
    locks_status st;
    locks_model *m = locks_model_load(path, &st);
    const int ok = strncmp(name, "ok-", 3) == 0;
    if (ok) test_cond(m != NULL, "%s: refused: %s (%s)", name, locks_status_str(st), locks_last_error());
    if (!m) return;
    const locks_model_info in = locks_model_get_info(m);
    if (ok) {
        char arch[32];
        snprintf(arch, sizeof arch, "%s", name + 3);
        char *dash = strchr(arch, '-');
        if (dash) *dash = '\0';
        test_cond(!strcmp(in.arch, arch), "%s: loaded as %s", name, in.arch);
    }
    int32_t widest = in.dim > in.ffn_dim ? in.dim : in.ffn_dim;
    if (in.n_heads * in.head_dim > widest) widest = in.n_heads * in.head_dim;
    float *row = malloc(sizeof(float) * (size_t)widest);
    SETUP(row);
    int finite = 1;
    for (int32_t l = -1; l < in.n_layers; l++)
        for (int k = l < 0 ? LLAMA_W_TOK_EMBD : LLAMA_W_Q; k <= (l < 0 ? LLAMA_W_OUTPUT : LLAMA_W_DOWN); k++) {
            const matmul_weight *w = llama_model_weight(m, l, (llama_weight_kind)k);
            test_cond(w && w->data && w->cols <= widest, "%s: layer %d weight %d", name, l, k);
            if (!w || !w->data || w->cols > widest) continue;
            for (int32_t r = 0; r < w->rows; r++) {
                matmul_row_f32(w, r, row);
                for (int32_t i = 0; i < w->cols; i++) finite &= isfinite(row[i]) != 0;
            }
        }
    if (ok) test_cond(finite, "%s: a weight row is not finite", name);
    free(row);
    locks_model_free(m);
}

int main(void) {
    DIR *dir = opendir(CORPUS);
    SETUP(dir);
    char *names[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) && n < 4096)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(dir);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    int n_ok = 0;
    for (int i = 0; i < n; i++) {
        n_ok += strncmp(names[i], "ok-", 3) == 0;
        check_file(names[i]);
        free(names[i]);
    }
    test_cond(n_ok >= 20, "only %d ok-* seeds", n_ok);
    printf("test_loader_corpus: %d files (%d seeds)\n", n, n_ok);
    return test_report("test_loader_corpus");
}
