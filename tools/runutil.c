/* runutil.c — shared pieces of `locks run` and `locks demo` (see runutil.h). */
#define _POSIX_C_SOURCE 200809L
#include "runutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"
#include "cmds.h"

static int log_verbose;

static void log_stderr(locks_log_level level, const char *msg, void *user) {
    (void)user;
    if (level <= LOCKS_LOG_WARN || log_verbose)
        fprintf(stderr, "%s: %s\n", level == LOCKS_LOG_ERROR ? "error" : level == LOCKS_LOG_WARN ? "warning" : "info", msg);
}

void ru_log_to_stderr(int verbose) {
    log_verbose = verbose;
    locks_set_log(log_stderr, NULL);
}

locks_model *ru_load_model(const char *path) {
    char def[4096];
    if (!path) {
        locks_model_default_path(def, sizeof def);
        path = def;
        if (access(path, R_OK) != 0) {
            fprintf(stderr, "no model at %s: run scripts/fetch-model.sh first (or pass -m FILE)\n", path);
            return NULL;
        }
    }
    locks_status st;
    double t0 = locks_now_ms();
    locks_model *m = locks_model_load(path, &st);
    if (!m) {
        fprintf(stderr, "cannot load %s: %s\n", path, tool_why(st));
        return NULL;
    }
    locks_model_info in = locks_model_get_info(m);
    fprintf(stderr, "model: %s (%s): %d layers, dim %d, %d/%d heads of %d, vocab %d (%.0f ms)\n", path,
            in.name, in.n_layers, in.dim, in.n_heads, in.n_kv_heads, in.head_dim, in.n_vocab,
            locks_now_ms() - t0);
    return m;
}

void ru_progress(int32_t done, int32_t total, void *user) {
    /* rate measured from the first chunk's end: the callback sees no start */
    static double t_first;
    static int32_t done_first;
    (void)user;
    if (total < 256) return;
    double now = locks_now_ms();
    if (done_first == 0 || done <= done_first) {
        t_first = now;
        done_first = done;
    }
    const int width = 40;
    int fill = (int)((int64_t)done * width / total);
    fprintf(stderr, "\rprefill [");
    for (int i = 0; i < width; i++) fputc(i < fill ? '#' : '.', stderr);
    fprintf(stderr, "] %d/%d", done, total);
    if (now > t_first) fprintf(stderr, " %.0f tok/s  ", (done - done_first) / ((now - t_first) / 1e3));
    if (done == total) {
        fputc('\n', stderr);
        done_first = 0;
    }
    fflush(stderr);
}

int32_t *ru_tokenize(const locks_model *m, const char *text, int add_bos, int parse_special, int32_t *n) {
    const locks_tokenizer *t = locks_model_tokenizer(m);
    size_t len = strlen(text);
    int32_t cap = (int32_t)(len + 2);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    if (!ids) return NULL;
    int32_t off = 0;
    locks_model_info in = locks_model_get_info(m);
    if (add_bos && in.bos_id >= 0) ids[off++] = in.bos_id;
    int32_t got = 0;
    locks_status st = locks_tokenizer_encode(t, text, len, parse_special != 0, ids + off, cap - off, &got);
    if (st != LOCKS_OK) {
        fprintf(stderr, "tokenizer: %s\n", tool_why(st));
        free(ids);
        return NULL;
    }
    *n = off + got;
    return ids;
}

void ru_stream_token(ru_stream *s, int32_t token) {
    char buf[512];
    size_t n = 0;
    if (locks_tokenizer_decode_stream(locks_model_tokenizer(s->m), &s->st, token, false, buf, sizeof buf, &n) != LOCKS_OK)
        return;
    if (s->f) {
        fwrite(buf, 1, n, s->f);
        fflush(s->f);
    }
    if (s->len + n + 1 > s->cap) {
        size_t cap = (s->len + n + 1) * 2;
        char *p = realloc(s->text, cap);
        if (!p) return;
        s->text = p;
        s->cap = cap;
    }
    memcpy(s->text + s->len, buf, n);
    s->len += n;
    s->text[s->len] = '\0';
}

void ru_stream_end(ru_stream *s) {
    char tail[4];
    size_t n = locks_detok_flush(&s->st, tail);
    if (n && s->f) fwrite(tail, 1, n, s->f);
    if (n && s->len + n + 1 <= s->cap) {
        memcpy(s->text + s->len, tail, n);
        s->len += n;
        s->text[s->len] = '\0';
    }
    if (s->f) fflush(s->f);
}

void ru_report(FILE *f, const locks_run_stats *s, int32_t n_layers) {
    (void)n_layers;
    if (s->n_prefill > 0)
        fprintf(f, "prefill: %d tokens in %.2f s (%.1f tok/s; %.1f CPU-s)\n", s->n_prefill, s->prefill_ms / 1e3,
                s->n_prefill / (s->prefill_ms / 1e3), s->prefill_cpu_ms / 1e3);
    if (s->n_decode > 0) {
        double steps = s->n_decode;
        fprintf(f, "decode:  %d tokens in %.2f s (%.1f tok/s; attention %.2f ms/token; %.1f CPU-ms/token)\n",
                s->n_decode, s->decode_ms / 1e3, s->n_decode / (s->decode_ms / 1e3), s->attn_ms / steps,
                s->decode_cpu_ms / steps);
        double read = ((double)s->bytes_meta + (double)s->bytes_kv) / steps;
        double dense = (double)s->bytes_dense / steps;
        fprintf(f, "KV bytes read per decode step (all layers): %.3f MB (summaries %.3f MB + K/V %.3f MB)"
                   " vs dense %.3f MB: %.1f%%\n",
                read / 1e6, (double)s->bytes_meta / steps / 1e6, (double)s->bytes_kv / steps / 1e6,
                dense / 1e6, dense > 0 ? 100.0 * read / dense : 0.0);
    }
}
