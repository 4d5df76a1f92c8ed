/*
 * tokenizer_gguf.c — the GGUF side of the tokenizer: copy the vocabulary arrays out of
 * the file, check them, and hand them to locks_tokenizer_init (tokenizer.c), which
 * knows nothing about GGUF.
 */
#include "tokenizer_gguf.h"

#include <math.h>
#include <string.h>

#include "util.h"

/* A string key as a NUL-terminated copy in buf; 0 if absent or not a string. */
static int get_str(const gguf *g, const char *key, char *buf, size_t cap) {
    const char *s;
    size_t len;
    if (gguf_get_str(g, key, &s, &len) != LOCKS_OK || len >= cap) return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    return 1;
}

/* An optional token id key: -1 if absent or outside [0, n_vocab). */
static int32_t get_id(const gguf *g, const char *key, int32_t n_vocab) {
    int32_t v;
    locks_status st = gguf_get_i32(g, key, &v);
    if (st == LOCKS_ERR_INVALID_ARG) return -1; /* absent */
    if (st != LOCKS_OK || v < 0 || v >= n_vocab) {
        locks_log(LOCKS_LOG_WARN, "tokenizer: ignoring %s (not an id in [0, %d))", key, n_vocab);
        return -1;
    }
    return v;
}

locks_tokenizer *locks_tokenizer_from_gguf(const gguf *g, locks_status *err) {
    locks_status st = LOCKS_ERR_FORMAT;
    locks_tokenizer *t = NULL;
    char **tokens = NULL, **merges = NULL;
    uint32_t *tok_lens = NULL, *merge_lens = NULL;
    int32_t *types = NULL;
    float *scores = NULL;
    uint64_t n_tok = 0, n_merge = 0;
    char model[32], pre[64];

    if (!g) {
        st = LOCKS_ERR_INVALID_ARG;
        goto fail;
    }
    if (!get_str(g, "tokenizer.ggml.model", model, sizeof model)) {
        locks_log(LOCKS_LOG_ERROR, "tokenizer: tokenizer.ggml.model is missing");
        st = LOCKS_ERR_FORMAT;
        goto fail;
    }
    int spm = strcmp(model, "llama") == 0;
    if (!spm && strcmp(model, "gpt2") != 0) {
        locks_log(LOCKS_LOG_ERROR, "tokenizer: tokenizer.ggml.model '%s' is not supported (\"gpt2\": byte-level BPE, "
                  "\"llama\": SentencePiece BPE)", model);
        st = LOCKS_ERR_UNSUPPORTED;
        goto fail;
    }
    st = gguf_get_arr_strs(g, "tokenizer.ggml.tokens", &tokens, &tok_lens, &n_tok);
    if (st != LOCKS_OK || n_tok == 0 || n_tok >= INT32_MAX) {
        locks_log(LOCKS_LOG_ERROR, "tokenizer: tokenizer.ggml.tokens missing or not a string array");
        if (st != LOCKS_ERR_OOM) st = LOCKS_ERR_FORMAT;
        goto fail;
    }
    for (uint64_t i = 0; i < n_tok; i++) {
        if (strlen(tokens[i]) != tok_lens[i]) {
            locks_log(LOCKS_LOG_ERROR, "tokenizer: token %llu holds a NUL byte", (unsigned long long)i);
            st = LOCKS_ERR_FORMAT;
            goto fail;
        }
    }

    gguf_val_type et;
    uint64_t n_types;
    const void *data;
    if (gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n_types, &data) == LOCKS_OK) {
        if (n_types != n_tok || !(et == GGUF_VAL_I32 || et == GGUF_VAL_U32 || et == GGUF_VAL_I8 ||
                                  et == GGUF_VAL_U8 || et == GGUF_VAL_I16 || et == GGUF_VAL_U16)) {
            locks_log(LOCKS_LOG_ERROR,
                      "tokenizer: tokenizer.ggml.token_type has %llu elements of type %d, want %llu integers",
                      (unsigned long long)n_types, (int)et, (unsigned long long)n_tok);
            st = LOCKS_ERR_FORMAT;
            goto fail;
        }
        st = LOCKS_ERR_OOM;
        types = locks_alloc((size_t)n_tok, sizeof *types);
        if (!types) goto fail;
        for (uint64_t i = 0; i < n_tok; i++) {
            types[i] = gguf_arr_i32(et, data, i);
            if (types[i] < LOCKS_TOKEN_UNDEFINED || types[i] > LOCKS_TOKEN_BYTE) {
                locks_log(LOCKS_LOG_ERROR, "tokenizer: token %llu has type %d", (unsigned long long)i, types[i]);
                st = LOCKS_ERR_FORMAT;
                goto fail;
            }
        }
    }

    if (spm) { /* SentencePiece: scores, no merges */
        uint64_t n_scores;
        if (gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n_scores, &data) != LOCKS_OK || n_scores != n_tok ||
            !(et == GGUF_VAL_F32 || et == GGUF_VAL_F64)) {
            locks_log(LOCKS_LOG_ERROR, "tokenizer: tokenizer.ggml.scores is missing or not %llu floats",
                      (unsigned long long)n_tok);
            st = LOCKS_ERR_FORMAT;
            goto fail;
        }
        st = LOCKS_ERR_OOM;
        scores = locks_alloc((size_t)n_tok, sizeof *scores);
        if (!scores) goto fail;
        for (uint64_t i = 0; i < n_tok; i++) {
            scores[i] = gguf_arr_f32(et, data, i);
            if (!isfinite(scores[i])) {
                locks_log(LOCKS_LOG_ERROR, "tokenizer: tokenizer.ggml.scores[%llu] is not finite", (unsigned long long)i);
                st = LOCKS_ERR_FORMAT;
                goto fail;
            }
        }
        int asp = 0;
        if (gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &asp) == LOCKS_OK && asp)
            locks_log(LOCKS_LOG_WARN, "tokenizer: add_space_prefix is set; this tokenizer adds no prefix");
        t = locks_tokenizer_init_spm((const char *const *)tokens, types, scores, (int32_t)n_tok, &st);
        if (!t) goto fail;
        goto special;
    }
    st = gguf_get_arr_strs(g, "tokenizer.ggml.merges", &merges, &merge_lens, &n_merge);
    if (st == LOCKS_ERR_INVALID_ARG) { /* no merges: every token stays a byte */
        n_merge = 0;
    } else if (st != LOCKS_OK || n_merge >= INT32_MAX) {
        locks_log(LOCKS_LOG_ERROR, "tokenizer: tokenizer.ggml.merges is not a string array");
        if (st != LOCKS_ERR_OOM) st = LOCKS_ERR_FORMAT;
        goto fail;
    }

    int have_pre = get_str(g, "tokenizer.ggml.pre", pre, sizeof pre);
    t = locks_tokenizer_init((const char *const *)tokens, types, (int32_t)n_tok,
                             (const char *const *)merges, (int32_t)n_merge, have_pre ? pre : NULL, &st);
    if (!t) goto fail;
special:;
    int32_t nv = (int32_t)n_tok;
    locks_token_ids ids = {get_id(g, "tokenizer.ggml.bos_token_id", nv),
                           get_id(g, "tokenizer.ggml.eos_token_id", nv),
                           get_id(g, "tokenizer.ggml.unknown_token_id", nv),
                           get_id(g, "tokenizer.ggml.padding_token_id", nv)};
    locks_tokenizer_set_special(t, ids); /* cannot fail: every id was range-checked */
    st = LOCKS_OK;

fail:
    gguf_strs_free(tokens, tok_lens);
    gguf_strs_free(merges, merge_lens);
    locks_free(types);
    locks_free(scores);
    if (err) *err = st;
    return t;
}
