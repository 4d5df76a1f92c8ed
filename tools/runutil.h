/* runutil.h — what `locks run` and `locks demo` share: model path, log printing,
 * prefill progress bar, text <-> tokens helpers, the end-of-run report. */
#ifndef LOCKS_RUNUTIL_H
#define LOCKS_RUNUTIL_H

#include <stdio.h>

#include "locks_model.h"

/* Prints library log messages (warnings and errors; all if verbose) to stderr. */
void ru_log_to_stderr(int verbose);

/* Loads the model at path (NULL: the fetched default), printing a hint to run
 * scripts/fetch-model.sh when the default is missing. NULL on failure (reported). */
locks_model *ru_load_model(const char *path);

/* Progress callback: a bar on stderr, drawn only for prompts of >= 256 tokens. */
void ru_progress(int32_t done, int32_t total, void *user);

/* Tokenizes text (parse_special: ChatML markers as special tokens); returns a malloc'ed
 * array and its length in *n, or NULL (reported). */
int32_t *ru_tokenize(const locks_model *m, const char *text, int add_bos, int parse_special,
                     int32_t *n);

/* Streams the text of generated tokens to f (holding back split UTF-8 characters). */
typedef struct {
    const locks_model *m;
    FILE *f;
    locks_detok_state st;
    char *text; /* everything generated, appended (may be NULL if not kept) */
    size_t len, cap;
} ru_stream;
void ru_stream_token(ru_stream *s, int32_t token);
void ru_stream_end(ru_stream *s);

/* "prefill N tok in X s (Y tok/s) / decode ... / KV bytes per step vs dense" to f. */
void ru_report(FILE *f, const locks_run_stats *s, int32_t n_layers);

#endif
