/*
 * test_tasks.c — the long-context task generators without the model.
 *
 * A fake tokenizer (one token per run of non-space bytes) sizes the prompts, so every
 * property can be checked independently of the generator's own arithmetic: the prompt
 * fits the token budget and nearly fills it, the needle sits at the requested depth and
 * its token span starts at the needle's first word, every answer is in the prompt (and,
 * for needle tasks, only inside an answer-bearing needle), the same seed gives the same
 * bytes, and the RULER score counts contained answers case-insensitively.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/tasks.h"

static int failures = 0, checks = 0;
#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        checks++;                                                                            \
        if (!(cond)) {                                                                       \
            if (failures++ < 20) {                                                           \
                fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);              \
                fprintf(stderr, __VA_ARGS__);                                                \
                fputc('\n', stderr);                                                         \
            }                                                                                \
        }                                                                                    \
    } while (0)

/* ---- fake tokenizer: one token per word ---------------------------------------------- */

static long n_count_calls = 0;

static int32_t count_words(const char *s, size_t n, void *user) {
    (void)user;
    n_count_calls++;
    int32_t w = 0;
    int in = 0;
    for (size_t i = 0; i < n; i++) {
        int sp = s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r';
        if (!sp && !in) w++;
        in = !sp;
    }
    return w;
}

static int32_t count_fail(const char *s, size_t n, void *user) {
    (void)s, (void)n, (void)user;
    return -1;
}

/* The word starting at token index k of s (fake tokenizer), copied into out. */
static void word_at(const char *s, int32_t k, char *out, size_t cap) {
    int32_t w = -1;
    int in = 0;
    out[0] = 0;
    for (size_t i = 0; s[i]; i++) {
        int sp = s[i] == ' ' || s[i] == '\n';
        if (!sp && !in && ++w == k) {
            size_t j = 0;
            while (s[i + j] && s[i + j] != ' ' && s[i + j] != '\n' && j + 1 < cap) {
                out[j] = s[i + j];
                j++;
            }
            out[j] = 0;
            return;
        }
        in = !sp;
    }
}

static int count_occurrences(const char *hay, const char *needle) {
    int n = 0;
    size_t k = strlen(needle);
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    (void)k;
    return n;
}

/* ---- prose: the GPL text Debian always installs, else a built-in paragraph ------------ */

static char *load_prose(size_t *len) {
    FILE *f = fopen("/usr/share/common-licenses/GPL-3", "rb");
    if (f) {
        char *buf = malloc(1 << 20);
        size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
        fclose(f);
        if (buf && n > 10000) {
            buf[n] = 0;
            *len = n;
            return buf;
        }
        free(buf);
    }
    static const char para[] =
        "It was a bright cold day in April, and the clocks were striking thirteen. The hallway "
        "smelt of boiled cabbage and old rag mats! At one end of it a coloured poster, too large "
        "for indoor display, had been tacked to the wall. Was it the face of a man of about "
        "forty-five, with a heavy black moustache? It was no use trying the lift.\n\n";
    size_t n1 = strlen(para), reps = 400;
    char *buf = malloc(n1 * reps + 1);
    if (!buf) return NULL;
    for (size_t i = 0; i < reps; i++) memcpy(buf + i * n1, para, n1);
    buf[n1 * reps] = 0;
    *len = n1 * reps;
    return buf;
}

/* Longest haystack sentence in fake tokens, for the fill and depth tolerances. */
#define MAX_UNIT_WORDS 64

static void check_sample(const locks_task_params *p, const locks_task *t) {
    const char *name = locks_task_name(p->kind);
    int32_t fixed_slack = MAX_UNIT_WORDS + 2;
    CHECK(t->n_tokens == count_words(t->prompt, t->prompt_len, NULL), "%s: n_tokens %d", name,
          t->n_tokens);
    CHECK(t->n_tokens <= p->n_tokens, "%s: %d tokens > budget %d", name, t->n_tokens, p->n_tokens);
    CHECK(t->n_tokens >= p->n_tokens - fixed_slack, "%s: %d tokens, budget %d (underfilled)", name,
          t->n_tokens, p->n_tokens);
    CHECK(strlen(t->prompt) == t->prompt_len, "%s: prompt_len", name);
    CHECK(t->n_answers >= 1 && t->n_answers <= LOCKS_TASK_MAX_ANSWERS, "%s: %d answers", name,
          t->n_answers);
    CHECK(t->max_gen > 0, "%s: max_gen %d", name, t->max_gen);
    /* Template around the user turn. */
    if (p->prompt_pre)
        CHECK(!strncmp(t->prompt, p->prompt_pre, strlen(p->prompt_pre)), "%s: prompt_pre", name);

    for (int32_t a = 0; a < t->n_answers; a++) {
        const char *ans = t->answers[a];
        CHECK(strstr(t->prompt, ans) != NULL, "%s: answer '%s' missing", name, ans);
        if (p->kind == LOCKS_TASK_FWE) continue;
        /* Every occurrence of the answer lies inside an answer-bearing needle. */
        for (const char *q = strstr(t->prompt, ans); q; q = strstr(q + 1, ans)) {
            size_t off = (size_t)(q - t->prompt);
            int inside = 0;
            for (int32_t i = 0; i < t->n_needles; i++)
                inside |= t->needles[i].carrier && off >= t->needles[i].byte_begin &&
                           off + strlen(ans) <= t->needles[i].byte_end;
            /* vt: a random 5-letter name may also occur in prose by chance */
            CHECK(inside || p->kind == LOCKS_TASK_VT, "%s: answer '%s' at byte %zu outside needles",
                  name, ans, off);
        }
    }
    if (p->kind == LOCKS_TASK_FWE) {
        CHECK(t->n_needles == 0, "fwe: %d needles", t->n_needles);
        /* The three answers are the three most frequent words, in order, strictly. */
        int c[3];
        for (int a = 0; a < 3; a++) {
            char w[64];
            snprintf(w, sizeof w, " %s ", t->answers[a]);
            c[a] = count_occurrences(t->prompt, w);
        }
        CHECK(c[0] > c[1] && c[1] > c[2] && c[2] > 0, "fwe: counts %d %d %d", c[0], c[1], c[2]);
        return;
    }
    CHECK(t->n_needles >= 1, "%s: no needle", name);
    CHECK(t->needles[0].carrier == 1, "%s: first needle not a carrier", name);
    /* Depth: within one sentence of the request. */
    double tol = (double)MAX_UNIT_WORDS / (double)(t->haystack_tokens > 0 ? t->haystack_tokens : 1);
    double dd = t->needles[0].depth - p->depth;
    CHECK(dd <= tol && dd >= -tol, "%s: depth %.3f, asked %.3f (tol %.3f)", name,
          (double)t->needles[0].depth, (double)p->depth, tol);
    /* Independent depth: words before the needle, minus fixed words before the haystack. */
    for (int32_t i = 0; i < t->n_needles; i++) {
        const locks_task_needle *nd = &t->needles[i];
        CHECK(nd->byte_begin < nd->byte_end && nd->byte_end <= t->prompt_len, "%s: needle %d bytes",
              name, i);
        CHECK(nd->tok_end > nd->tok_begin && nd->tok_end <= t->n_tokens, "%s: needle %d tokens",
              name, i);
        char w[64], first[64];
        word_at(t->prompt, nd->tok_begin, w, sizeof w);
        sscanf(t->prompt + nd->byte_begin, "%63s", first);
        CHECK(!strcmp(w, first), "%s: needle %d token %d is '%s', needle starts '%s'", name, i,
              nd->tok_begin, w, first);
        CHECK(nd->tok_end - nd->tok_begin ==
                  count_words(t->prompt + nd->byte_begin, nd->byte_end - nd->byte_begin, NULL),
              "%s: needle %d token span", name, i);
        if (i > 0 && p->kind == LOCKS_TASK_VT)
            CHECK(nd->byte_begin > t->needles[i - 1].byte_begin, "vt: hop %d out of order", i);
    }
}

int main(void) {
    size_t prose_len = 0;
    char *prose = load_prose(&prose_len);
    if (!prose) {
        fprintf(stderr, "no memory\n");
        return 1;
    }
    const float depths[] = {0.0f, 0.1f, 0.35f, 0.5f, 0.8f, 1.0f};
    const int32_t sizes[] = {300, 1024, 4096};
    int n_samples = 0;

    for (int k = 0; k < LOCKS_TASK_COUNT; k++) {
        for (int h = LOCKS_HAYSTACK_NOISE; h <= LOCKS_HAYSTACK_PROSE; h++) {
            for (int si = 0; si < 3; si++) {
                for (int di = 0; di < 6; di++) {
                    locks_task_params p = locks_task_default_params();
                    p.kind = (locks_task_kind)k;
                    p.haystack = (locks_haystack_kind)h;
                    p.n_tokens = sizes[si];
                    p.depth = depths[di];
                    p.seed = 1000u + (uint64_t)(k * 97 + h * 13 + si * 7 + di);
                    p.prose = prose;
                    p.prose_len = prose_len;
                    p.count = count_words;
                    p.prompt_pre = "<|im_start|>user\n";
                    p.prompt_post = "<|im_end|>\n<|im_start|>assistant\n";
                    locks_task t;
                    locks_status st = locks_task_generate(&p, &t);
                    CHECK(st == LOCKS_OK, "%s/%s/%d/%.2f: %s", locks_task_name(p.kind),
                          locks_haystack_name(p.haystack), p.n_tokens, (double)p.depth,
                          locks_status_str(st));
                    if (st) continue;
                    check_sample(&p, &t);
                    n_samples++;

                    /* Same seed: same bytes. Other seed: other bytes. */
                    locks_task t2;
                    CHECK(locks_task_generate(&p, &t2) == LOCKS_OK, "regen");
                    CHECK(t2.prompt_len == t.prompt_len && !memcmp(t2.prompt, t.prompt, t.prompt_len),
                          "%s: not deterministic", locks_task_name(p.kind));
                    CHECK(t2.n_answers == t.n_answers && !strcmp(t2.answers[0], t.answers[0]),
                          "answers differ on regen");
                    locks_task_free(&t2);
                    p.seed += 1;
                    CHECK(locks_task_generate(&p, &t2) == LOCKS_OK, "gen seed+1");
                    CHECK(strcmp(t2.prompt, t.prompt) != 0, "%s: seed ignored",
                          locks_task_name(p.kind));
                    locks_task_free(&t2);

                    /* Scoring. */
                    char out[1024] = "The answer:";
                    for (int32_t a = 0; a < t.n_answers; a++) {
                        strcat(out, " ");
                        strcat(out, t.answers[a]);
                    }
                    CHECK(locks_task_score(&t, out) == 1.0, "score all");
                    for (char *c = out; *c; c++)
                        if (*c >= 'a' && *c <= 'z') *c = (char)(*c - 'a' + 'A');
                    CHECK(locks_task_score(&t, out) == 1.0, "score is case-sensitive: %s", out);
                    CHECK(locks_task_score(&t, "I do not know.") == 0.0, "score nothing");
                    if (t.n_answers >= 2) {
                        char half[256];
                        snprintf(half, sizeof half, "%s and more", t.answers[1]);
                        double s = locks_task_score(&t, half);
                        CHECK(s > 0.99 / t.n_answers && s < 1.01 / t.n_answers, "partial %.3f", s);
                    }
                    locks_task_free(&t);
                    CHECK(t.prompt == NULL && t.n_answers == 0, "free resets");
                }
            }
        }
    }

    /* Errors. */
    locks_task_params p = locks_task_default_params();
    locks_task t;
    p.count = count_words;
    p.kind = LOCKS_TASK_NIAH_SINGLE;
    p.haystack = LOCKS_HAYSTACK_NOISE;
    p.n_tokens = 10;
    CHECK(locks_task_generate(&p, &t) == LOCKS_ERR_INVALID_ARG, "tiny budget accepted");
    CHECK(t.prompt == NULL, "failed generate leaves a prompt");
    p.n_tokens = 1000;
    p.depth = 1.5f;
    CHECK(locks_task_generate(&p, &t) == LOCKS_ERR_INVALID_ARG, "depth 1.5 accepted");
    p.depth = 0.5f;
    p.haystack = LOCKS_HAYSTACK_PROSE;
    CHECK(locks_task_generate(&p, &t) == LOCKS_ERR_INVALID_ARG, "prose without text accepted");
    p.haystack = LOCKS_HAYSTACK_NOISE;
    p.count = count_fail;
    CHECK(locks_task_generate(&p, &t) == LOCKS_ERR_FORMAT, "count failure not reported");
    p.count = NULL;
    CHECK(locks_task_generate(&p, &t) == LOCKS_ERR_INVALID_ARG, "NULL count accepted");
    p.count = count_words;
    p.kind = LOCKS_TASK_NIAH_MULTIKEY;
    p.n_keys = LOCKS_TASK_MAX_NEEDLES + 1;
    CHECK(locks_task_generate(&p, &t) == LOCKS_ERR_INVALID_ARG, "too many keys accepted");

    /* Names round-trip. */
    for (int k = 0; k < LOCKS_TASK_COUNT; k++) {
        locks_task_kind back;
        CHECK(locks_task_parse(locks_task_name((locks_task_kind)k), &back) == LOCKS_OK &&
                  back == (locks_task_kind)k,
              "name %d", k);
    }
    locks_task_kind bad;
    CHECK(locks_task_parse("nope", &bad) == LOCKS_ERR_INVALID_ARG, "unknown task parsed");
    CHECK(locks_task_haystack(LOCKS_TASK_PASSKEY, LOCKS_HAYSTACK_AUTO) == LOCKS_HAYSTACK_NOISE &&
              locks_task_haystack(LOCKS_TASK_NIAH_SINGLE, LOCKS_HAYSTACK_AUTO) == LOCKS_HAYSTACK_PROSE,
          "auto haystack");

    free(prose);
    printf("test_tasks: %d samples, %d checks, %d failed (%ld count calls)\n", n_samples, checks,
           failures, n_count_calls);
    return failures ? 1 : 0;
}
