/*
 * fuzz_model.c — libFuzzer harness for the model loader (locks_model_load's body,
 * src/model/llama.c, through llama_model_load_buffer): hyper-parameters, every layer's
 * tensor table checked against them, norms and biases read as floats, the tokenizer.
 * Seeds (tests/fuzz/corpus-model/, scripts/gen_model_corpus.py) are tiny complete models
 * of every architecture the engine takes (llama, qwen2, qwen3, gemma3) with weights of
 * every tensor type it reads (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K,
 * Q6_K), so mutations start from real tensor tables. Any input must be refused with a
 * status or give a model whose info is consistent and whose weights lie inside the
 * buffer (libFuzzer's exact-size copy: ASan sees any read past it; every row of every
 * weight is dequantized once here). Build and run with scripts/fuzz-gguf.sh SECONDS
 * model; crashers go into tests/fuzz/corpus-model/ once fixed (test_model_corpus
 * replays them).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "model/llama_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile float sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    locks_status st;
    locks_model *m = llama_model_load_buffer(data, size, &st);
    if (!m) return 0;
    const locks_model_info in = locks_model_get_info(m);
    if (in.n_layers < 1 || in.dim < 1 || in.n_vocab < 1 || in.n_heads % in.n_kv_heads) abort();
    int32_t widest = in.dim > in.ffn_dim ? in.dim : in.ffn_dim;
    if (in.n_heads * in.head_dim > widest) widest = in.n_heads * in.head_dim;
    float *row = malloc(sizeof(float) * (size_t)widest);
    if (!row) abort();
    for (int32_t l = -1; l < in.n_layers; l++) /* -1: the embeddings and the output */
        for (int k = l < 0 ? LLAMA_W_TOK_EMBD : LLAMA_W_Q; k <= (l < 0 ? LLAMA_W_OUTPUT : LLAMA_W_DOWN); k++) {
            const matmul_weight *w = llama_model_weight(m, l, (llama_weight_kind)k);
            if (!w || !w->data) continue;
            if (w->cols > widest) abort(); /* a weight wider than the shape says */
            for (int32_t r = 0; r < w->rows; r += w->rows > 8 ? w->rows / 8 : 1) {
                matmul_row_f32(w, r, row);
                sink += row[0];
            }
            matmul_row_f32(w, w->rows - 1, row); /* the last row: the end of the tensor */
            sink += row[w->cols - 1];
        }
    free(row);
    locks_model_free(m);
    return 0;
}
