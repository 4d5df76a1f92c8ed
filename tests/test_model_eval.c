/*
 * test_model_eval.c — the long-context task pipeline on the real model, in miniature.
 *
 * 1. Truncate and re-decode: `locks eval` answers every (selector, budget) from one
 *    prefill by truncating the sequence back after each answer. Check the premise: with
 *    the prefill ending inside a page and the decode filling that page (so its summary
 *    is built), truncating and decoding the same tokens again gives the same logits as
 *    the first time, for LOCKS at a small budget; and continuing without the truncation
 *    gives different ones (the comparison can fail).
 * 2. `locks eval --tasks all`, one 384-token sample per task, `full` and `locks` at one
 *    budget (answers capped at 12 tokens): the JSONL holds one sane record per decode, the needle tasks measured
 *    carrier pages, dense attention finds the pass key, and a rerun resumes (adds nothing).
 *
 * Needs the model ($LOCKS_MODEL, else scripts/fetch-model.sh, run from the source root as
 * ctest does) and the
 * `locks` binary next to this test in the build directory.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "locks.h"
#include "locks_model.h"
#include "test_model_util.h"

static int failures = 0;
#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            failures++;                                                                      \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                  \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
        }                                                                                    \
    } while (0)

/* Decodes n tokens greedily from tok, writing the logits of each step to logits[n][V]. */
static locks_status decode_n(locks_ctx *c, int32_t tok, int32_t n, int32_t V, float *logits) {
    for (int32_t i = 0; i < n; i++) {
        locks_status st = locks_ctx_decode(c, tok, logits + (size_t)i * V);
        if (st) return st;
        tok = tu_argmax(logits + (size_t)i * V, V);
    }
    return LOCKS_OK;
}

static double max_abs_diff(const float *a, const float *b, size_t n, size_t *at) {
    double m = 0;
    *at = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m) {
            m = d;
            *at = i;
        }
    }
    return m;
}

static void test_truncate(const locks_model *m) {
    locks_model_info info = locks_model_get_info(m);
    const locks_tokenizer *tok = locks_model_tokenizer(m);
    const int32_t V = info.n_vocab;
    char text[8192] = "";
    static const char *noise[] = {"The grass is green. ", "The sky is blue. ", "The sun is yellow. ",
                                  "Here we go. ", "There and back again. "};
    for (int i = 0; i < 60; i++) strcat(text, noise[i % 5]);
    strcat(text, "The pass key is 58213. Remember it. ");
    for (int i = 0; i < 20; i++) strcat(text, noise[i % 5]);
    strcat(text, "What is the pass key? The pass key is");
    int32_t ids[4096], n = 0;
    locks_status st = locks_tokenizer_encode(tok, text, strlen(text), true, ids, 4096, &n);
    CHECK(st == LOCKS_OK && n > 200, "encode: %s, %d tokens", locks_status_str(st), n);
    if (st || n <= 200) return;
    /* The prefill ends 9 tokens into a page; 12 decode steps fill that page. */
    int32_t n_pre = (n / 16) * 16 - 16 + 9;

    locks_ctx_params cp = locks_ctx_default_params();
    cp.n_ctx = 1024;
    cp.n_threads = 2;
    cp.step.selector = LOCKS_SEL_LOCKS;
    cp.step.budget = 64;
    locks_ctx *c = locks_ctx_init(m, cp, &st);
    CHECK(c != NULL, "ctx: %s", locks_status_str(st));
    if (!c) return;
    const int32_t steps = 12;
    float *a = malloc(sizeof(float) * (size_t)V * steps);
    float *b = malloc(sizeof(float) * (size_t)V * steps);
    float *cont = malloc(sizeof(float) * (size_t)V * steps);
    if (!a || !b || !cont) goto done;
    st = locks_ctx_prefill(c, ids, n_pre, NULL);
    CHECK(st == LOCKS_OK, "prefill: %s", locks_status_str(st));
    st = decode_n(c, ids[n_pre], steps, V, a);
    CHECK(st == LOCKS_OK && locks_ctx_len(c) == n_pre + steps, "decode: %s", locks_status_str(st));
    /* Negative control: continue instead of truncating. */
    st = decode_n(c, tu_argmax(a + (size_t)(steps - 1) * V, V), steps, V, cont);
    CHECK(st == LOCKS_OK, "decode on: %s", locks_status_str(st));
    st = locks_ctx_truncate(c, n_pre);
    CHECK(st == LOCKS_OK && locks_ctx_len(c) == n_pre, "truncate: %s, len %d", locks_status_str(st),
          locks_ctx_len(c));
    CHECK(locks_ctx_truncate(c, n_pre + 1) == LOCKS_ERR_INVALID_ARG, "truncate past the end");
    st = decode_n(c, ids[n_pre], steps, V, b);
    CHECK(st == LOCKS_OK, "re-decode: %s", locks_status_str(st));
    size_t at;
    double d = max_abs_diff(a, b, (size_t)V * steps, &at);
    CHECK(d <= 1e-4, "re-decode after truncate differs: max |diff| %.3g at step %zu token %zu (%g vs %g)",
          d, at / (size_t)V, at % (size_t)V, (double)a[at], (double)b[at]);
    double dc = max_abs_diff(a, cont, (size_t)V * steps, &at);
    CHECK(dc > 1e-2, "control: continuing gave the same logits (max diff %.3g)", dc);
    printf("truncate: %d prefill + %d decode tokens, re-decode max |diff| %.3g (control %.3g)\n",
           n_pre, steps, d, dc);
    fflush(stdout);
done:
    free(a);
    free(b);
    free(cont);
    locks_ctx_free(c);
}

/* ---- the command ------------------------------------------------------------------ */

static int jnum(const char *line, const char *name, double *out) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", name);
    const char *p = strstr(line, pat);
    if (!p) return -1;
    p += strlen(pat);
    if (!strncmp(p, "null", 4)) return 1;
    char *end;
    *out = strtod(p, &end);
    return end == p ? -1 : 0;
}

static int jstr(const char *line, const char *name, char *out, size_t cap) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", name);
    const char *p = strstr(line, pat);
    if (!p) return -1;
    p += strlen(pat);
    size_t k = 0;
    while (*p && *p != '"' && k + 1 < cap) out[k++] = *p++;
    out[k] = 0;
    return 0;
}

/* Prompt tokens per sample: short, to keep the test at CI size (7 prefills). */
#define CONTEXT 384

static int count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0, ch;
    while ((ch = fgetc(f)) != EOF) n += ch == '\n';
    fclose(f);
    return n;
}

static void test_command(const char *argv0, const char *model) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", argv0);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    char bin[1100], jsonl[] = "/tmp/locks-test-eval-XXXXXX";
    snprintf(bin, sizeof bin, "%s/locks", dir);
    CHECK(access(bin, X_OK) == 0, "no locks binary at %s", bin);
    int fd = mkstemp(jsonl);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    close(fd);
    char cmd[4096];
    /* Prose from a licence text every Debian system has, so CI needs no fetch. */
    snprintf(cmd, sizeof cmd,
             "LOCKS_EVAL_COMMIT=test '%s' eval --tasks all -m '%s' --contexts %d --samples 1 "
             "--selectors full,locks --budgets 128 --max-gen 12 "
             "--prose /usr/share/common-licenses/GPL-3 "
             "-t 2 --out '%s' --json > '%s.summary'",
             bin, model, CONTEXT, jsonl, jsonl);
    int rc = system(cmd);
    CHECK(rc == 0, "`%s` exited with %d", cmd, rc);

    FILE *f = fopen(jsonl, "r");
    CHECK(f != NULL, "no %s", jsonl);
    if (!f) return;
    char line[16384];
    int n = 0, n_full = 0, n_locks = 0, passkey_full_ok = 0, measured_needle = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        char task[64] = "", sel[64] = "";
        double score = -1, ev = -1, hit = -1, gen = -1, ntok = -1, budget = -1, mass = -1, mass_or = -1;
        CHECK(!jstr(line, "task", task, sizeof task) && !jstr(line, "selector", sel, sizeof sel),
              "record %d: no task/selector: %.200s", n, line);
        CHECK(!jnum(line, "score", &score) && score >= 0 && score <= 1, "record %d: score %g", n, score);
        CHECK(!jnum(line, "gen_tokens", &gen) && gen >= 0, "record %d: gen_tokens", n);
        CHECK(!jnum(line, "n_tokens", &ntok) && ntok > CONTEXT - 96 && ntok <= CONTEXT, "record %d (%s): n_tokens %g",
              n, task, ntok);
        CHECK(!jnum(line, "carrier_events", &ev) && !jnum(line, "carrier_hits", &hit) && hit >= 0 &&
                  hit <= ev,
              "record %d: carrier %g/%g", n, hit, ev);
        CHECK(!jnum(line, "budget", &budget), "record %d: budget", n);
        if (!strcmp(sel, "full")) {
            n_full++;
            CHECK(budget == 0, "full with budget %g", budget);
            CHECK(ev == 0, "full measured carriers");
            if (!strcmp(task, "passkey") && score == 1.0) passkey_full_ok = 1;
        } else if (!strcmp(sel, "locks")) {
            n_locks++;
            CHECK(budget == 128, "locks budget %g", budget);
            CHECK(!jnum(line, "mass_cov", &mass) && !jnum(line, "mass_cov_oracle", &mass_or) &&
                      mass > 0 && mass <= mass_or + 1e-6 && mass_or <= 1 + 1e-6,
                  "record %d (%s): mass %g, oracle %g", n, task, mass, mass_or);
            if (strcmp(task, "fwe")) {
                CHECK(ev > 0, "record %d (%s): no carrier event measured", n, task);
                measured_needle += ev > 0;
            } else {
                CHECK(ev == 0, "fwe has carriers");
            }
        }
    }
    fclose(f);
    CHECK(n == 14 && n_full == 7 && n_locks == 7, "%d records (%d full, %d locks), expected 14", n,
          n_full, n_locks);
    CHECK(passkey_full_ok, "dense attention did not find the pass key in %d tokens", CONTEXT);
    char sum_path[64];
    snprintf(sum_path, sizeof sum_path, "%s.summary", jsonl);
    FILE *sf = fopen(sum_path, "r");
    char sbuf[8192] = "";
    if (sf) {
        size_t k = fread(sbuf, 1, sizeof sbuf - 1, sf);
        sbuf[k] = 0;
        fclose(sf);
    }
    CHECK(strstr(sbuf, "\"results\":[{") && strstr(sbuf, "\"selector\":\"locks\""),
          "--json summary: %.200s", sbuf);

    /* Resume: the same command adds nothing. */
    rc = system(cmd);
    CHECK(rc == 0, "rerun exited with %d", rc);
    int n2 = count_lines(jsonl);
    CHECK(n2 == n, "rerun appended: %d lines, then %d", n, n2);
    printf("eval command: %d records, %d needle tasks measured, passkey found by full: %d\n", n,
           measured_needle, passkey_full_ok);
    remove(jsonl);
    remove(sum_path);
}

int main(int argc, char **argv) {
    (void)argc;
    char path[1024];
    locks_model *m = tu_load_model("test_model_eval", path, sizeof path);
    test_truncate(m);
    locks_model_free(m);
    test_command(argv[0], path);
    printf("test_model_eval: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
