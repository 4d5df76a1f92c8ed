/*
 * tasks.c — RULER-style long-context task generators (see tasks.h for the contract).
 *
 * A sample is assembled from *units*: haystack sentences, each with a leading space and
 * its own token count, and needles inserted between them. Sizing counts every unit once
 * and the fixed parts (template, instruction, needles, question) once, fills the token
 * budget with whole units, then counts the assembled prompt and drops trailing units
 * until it fits (BPE rarely merges across a space-word boundary, so this converges in a
 * step or two). Everything random comes from one splitmix64 stream seeded by p->seed.
 */
#include "tasks.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

/* ---------------------------------------------------------------------------------- */
/* Names                                                                              */
/* ---------------------------------------------------------------------------------- */

static const char *const TASK_NAMES[LOCKS_TASK_COUNT] = {
    "passkey", "niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt", "fwe",
};
static const char *const HAYSTACK_NAMES[] = {"auto", "noise", "prose"};

const char *locks_task_name(locks_task_kind k) {
    return (k >= 0 && k < LOCKS_TASK_COUNT) ? TASK_NAMES[k] : NULL;
}

locks_status locks_task_parse(const char *name, locks_task_kind *out) {
    if (!name || !out) return LOCKS_ERR_INVALID_ARG;
    for (int i = 0; i < LOCKS_TASK_COUNT; i++)
        if (!strcmp(name, TASK_NAMES[i])) {
            *out = (locks_task_kind)i;
            return LOCKS_OK;
        }
    return LOCKS_ERR_INVALID_ARG;
}

const char *locks_haystack_name(locks_haystack_kind k) {
    return (k >= LOCKS_HAYSTACK_AUTO && k <= LOCKS_HAYSTACK_PROSE) ? HAYSTACK_NAMES[k] : NULL;
}

locks_status locks_haystack_parse(const char *name, locks_haystack_kind *out) {
    if (!name || !out) return LOCKS_ERR_INVALID_ARG;
    for (int i = 0; i <= LOCKS_HAYSTACK_PROSE; i++)
        if (!strcmp(name, HAYSTACK_NAMES[i])) {
            *out = (locks_haystack_kind)i;
            return LOCKS_OK;
        }
    return LOCKS_ERR_INVALID_ARG;
}

locks_haystack_kind locks_task_haystack(locks_task_kind task, locks_haystack_kind k) {
    if (k != LOCKS_HAYSTACK_AUTO) return k;
    switch (task) {
    case LOCKS_TASK_NIAH_SINGLE:
    case LOCKS_TASK_NIAH_MULTIKEY:
    case LOCKS_TASK_NIAH_MULTIVALUE:
    case LOCKS_TASK_NIAH_MULTIQUERY: return LOCKS_HAYSTACK_PROSE;
    default: return LOCKS_HAYSTACK_NOISE;
    }
}

locks_task_params locks_task_default_params(void) {
    locks_task_params p;
    memset(&p, 0, sizeof p);
    p.kind = LOCKS_TASK_PASSKEY;
    p.n_tokens = 1024;
    p.depth = 0.5f;
    p.seed = 1;
    p.haystack = LOCKS_HAYSTACK_AUTO;
    p.n_keys = 4;
    p.n_values = 4;
    p.n_queries = 4;
    p.n_hops = 4;
    return p;
}

/* ---------------------------------------------------------------------------------- */
/* Small helpers: random stream, growable string                                     */
/* ---------------------------------------------------------------------------------- */

typedef struct {
    uint64_t s;
} rng_t;

static uint64_t rng_next(rng_t *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform integer in [0, n), n >= 1. */
static uint32_t rng_below(rng_t *r, uint32_t n) { return (uint32_t)(rng_next(r) % n); }

static double rng_unit(rng_t *r) { return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *t = locks_alloc(cap, 1);
        if (!t) {
            b->oom = 1;
            return;
        }
        if (b->s) memcpy(t, b->s, b->len);
        locks_free(b->s);
        b->s = t;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void sb_str(sbuf *b, const char *s) {
    if (s) sb_put(b, s, strlen(s));
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *t = locks_alloc(n + 1, 1);
    if (t) memcpy(t, s, n + 1);
    return t;
}

/* ---------------------------------------------------------------------------------- */
/* Vocabulary for keys, values, variable names, coded words                          */
/* ---------------------------------------------------------------------------------- */

static const char *const ADJECTIVES[] = {
    "fearless", "quiet",   "amber",   "brave",    "crooked", "dusty",   "eager",   "fragile",
    "gentle",   "hollow",  "icy",     "jolly",    "keen",    "lively",  "mellow",  "nimble",
    "orange",   "polite",  "rapid",   "silent",   "tender",  "urban",   "vivid",   "wooden",
    "young",    "zealous", "ancient", "bitter",   "curious", "distant", "elegant", "faithful",
    "golden",   "humble",  "jagged",  "lonely",   "modern",  "narrow",  "obscure", "purple",
};
static const char *const NOUNS[] = {
    "lamp",    "river",  "anchor",  "basket",  "candle", "dolphin", "engine",  "falcon",
    "garden",  "harbor", "island",  "jacket",  "kettle", "ladder",  "meadow",  "needle",
    "orchard", "pencil", "quarry",  "rocket",  "saddle", "teapot",  "umbrella", "violin",
    "wagon",   "yacht",  "zipper",  "bridge",  "castle", "desert",  "feather", "glacier",
    "hammer",  "igloo",  "jungle",  "lantern", "mirror", "notebook", "oyster", "parrot",
};
#define N_ADJ ((uint32_t)(sizeof ADJECTIVES / sizeof *ADJECTIVES))
#define N_NOUN ((uint32_t)(sizeof NOUNS / sizeof *NOUNS))

/* A key "adjective-noun" not among the first n_used ones in used[]. */
static void pick_key(rng_t *r, char used[][48], int n_used, char *out) {
    for (;;) {
        snprintf(out, 48, "%s-%s", ADJECTIVES[rng_below(r, N_ADJ)], NOUNS[rng_below(r, N_NOUN)]);
        int dup = 0;
        for (int i = 0; i < n_used; i++) dup |= !strcmp(used[i], out);
        if (!dup) return;
    }
}

/* A number of `digits` digits, no leading zero, distinct from used[0, n_used). */
static void pick_number(rng_t *r, int digits, char used[][48], int n_used, char *out) {
    for (;;) {
        out[0] = (char)('1' + rng_below(r, 9));
        for (int i = 1; i < digits; i++) out[i] = (char)('0' + rng_below(r, 10));
        out[digits] = 0;
        int dup = 0;
        for (int i = 0; i < n_used; i++) dup |= !strcmp(used[i], out);
        if (!dup) return;
    }
}

static void pick_upper_name(rng_t *r, char used[][48], int n_used, char *out) {
    for (;;) {
        for (int i = 0; i < 5; i++) out[i] = (char)('A' + rng_below(r, 26));
        out[5] = 0;
        int dup = 0;
        for (int i = 0; i < n_used; i++) dup |= !strcmp(used[i], out);
        if (!dup) return;
    }
}

/* ---------------------------------------------------------------------------------- */
/* Haystack units                                                                     */
/* ---------------------------------------------------------------------------------- */

static const char *const NOISE[] = {
    " The grass is green.", " The sky is blue.", " The sun is yellow.", " Here we go.",
    " There and back again.",
};
#define N_NOISE 5

#define MAX_UNIT_BYTES 320 /* longer prose sentences are cut at a space past this */

typedef struct {
    const char *s; /* text with its leading space */
    int32_t len;
    int32_t tok;
} unit_t;

/* The prose text with whitespace runs collapsed to one space and a leading space. */
static char *normalize_prose(const char *src, size_t n, size_t *out_len) {
    char *t = locks_alloc(n + 2, 1);
    if (!t) return NULL;
    size_t k = 0;
    t[k++] = ' ';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c == 0) continue;
        if (isspace(c)) {
            if (t[k - 1] != ' ') t[k++] = ' ';
        } else {
            t[k++] = (char)c;
        }
    }
    while (k > 1 && t[k - 1] == ' ') k--;
    t[k] = 0;
    *out_len = k;
    return t;
}

static int unit_has_words(const char *s, int32_t len) {
    int letters = 0;
    for (int32_t i = 0; i < len; i++) letters += isalpha((unsigned char)s[i]) != 0;
    return letters >= 4;
}

/* Splits normalized prose into sentence units (each begins at a space). Returns the
 * count written to units (at most cap); units point into text. */
static int32_t split_prose(const char *text, size_t len, unit_t *units, int32_t cap) {
    int32_t n = 0;
    size_t start = 0; /* at a space */
    for (size_t i = 1; i <= len && n < cap; i++) {
        int end = 0;
        if (i == len) end = 1;
        else if (text[i] == ' ') {
            char prev = text[i - 1];
            if (prev == '.' || prev == '!' || prev == '?') end = 1;
            else if (i - start > MAX_UNIT_BYTES) end = 1;
        }
        if (!end) continue;
        int32_t ulen = (int32_t)(i - start);
        if (ulen > 1 && unit_has_words(text + start, ulen)) {
            units[n].s = text + start;
            units[n].len = ulen;
            units[n].tok = -1;
            n++;
        }
        start = i;
    }
    return n;
}

/* ---------------------------------------------------------------------------------- */
/* Assembly                                                                           */
/* ---------------------------------------------------------------------------------- */

typedef struct {
    const locks_task_params *p;
    char instruction[512];
    char question[512];
    char answer_prefix[512];
    int32_t n_needles;
    char needle_text[LOCKS_TASK_MAX_NEEDLES][160];
    int32_t carrier[LOCKS_TASK_MAX_NEEDLES];
    /* Placement: needle 0 at `depth`; ordered needles (vt) after it in order; others at
     * random boundaries. rand_pos[i] in [0, 1) is drawn once so sizing cannot move it. */
    int ordered;
    double rand_pos[LOCKS_TASK_MAX_NEEDLES];
    /* Haystack: a cyclic list of units, starting at `first`. */
    const unit_t *units;
    int32_t n_units;
    int32_t first;
} gen_t;

static int32_t count_tokens(const gen_t *g, const char *s, size_t n) {
    return g->p->count(s, n, g->p->count_user);
}

/* Boundary b in [0, m] (insert before unit b) whose cumulative token share is closest
 * to share; cum[0..m] cumulative token counts. */
static int32_t boundary_at(const int64_t *cum, int32_t m, double share) {
    double target = share * (double)cum[m];
    int32_t best = 0;
    double best_d = INFINITY;
    for (int32_t b = 0; b <= m; b++) {
        double d = fabs((double)cum[b] - target);
        if (d < best_d) {
            best_d = d;
            best = b;
        }
    }
    return best;
}

/* Builds the prompt with the first m haystack units into *out (reset first), and the
 * needles' byte spans and depths into t. */
static locks_status assemble(const gen_t *g, int32_t m, const int64_t *cum, sbuf *out,
                             locks_task *t) {
    const locks_task_params *p = g->p;
    int32_t at[LOCKS_TASK_MAX_NEEDLES];
    at[0] = boundary_at(cum, m, p->depth);
    for (int32_t i = 1; i < g->n_needles; i++) {
        if (g->ordered) { /* spread over [at[0], m] in order */
            int32_t lo = at[i - 1];
            at[i] = lo + (int32_t)floor(g->rand_pos[i] * (double)(m - lo + 1));
            if (at[i] > m) at[i] = m;
        } else {
            at[i] = (int32_t)floor(g->rand_pos[i] * (double)(m + 1));
            if (at[i] > m) at[i] = m;
        }
    }
    out->len = 0;
    if (out->s) out->s[0] = 0;
    sb_str(out, p->prompt_pre);
    sb_str(out, g->instruction);
    for (int32_t b = 0; b <= m; b++) {
        for (int32_t i = 0; i < g->n_needles; i++) {
            if (at[i] != b) continue;
            t->needles[i].byte_begin = out->len;
            sb_str(out, g->needle_text[i]);
            t->needles[i].byte_end = out->len;
            t->needles[i].carrier = g->carrier[i];
            t->needles[i].depth = cum[m] > 0 ? (float)((double)cum[b] / (double)cum[m]) : 0.0f;
        }
        if (b < m) {
            const unit_t *u = &g->units[(g->first + b) % g->n_units];
            sb_put(out, u->s, (size_t)u->len);
        }
    }
    sb_str(out, g->question);
    sb_str(out, p->prompt_post);
    sb_str(out, g->answer_prefix);
    t->n_needles = g->n_needles;
    return out->oom ? LOCKS_ERR_OOM : LOCKS_OK;
}

/* Fills the token budget with haystack units and writes the final prompt into t. */
static locks_status build_haystack_sample(gen_t *g, locks_task *t) {
    const locks_task_params *p = g->p;
    locks_status st = LOCKS_OK;
    sbuf b = {0};
    int64_t *cum = NULL;
    int32_t *tok_cache = NULL;

    /* Fixed parts: the prompt with no haystack at all. */
    st = assemble(g, 0, (int64_t[1]){0}, &b, t);
    if (st) goto done;
    int32_t fixed = count_tokens(g, b.s, b.len);
    if (fixed < 0) {
        st = LOCKS_ERR_FORMAT;
        goto done;
    }
    if (fixed > p->n_tokens) {
        locks_log(LOCKS_LOG_ERROR, "tasks: %d tokens requested but the fixed parts take %d",
                  p->n_tokens, fixed);
        st = LOCKS_ERR_INVALID_ARG;
        goto done;
    }
    int64_t room = p->n_tokens - fixed;

    /* Take units in order while they fit. Each distinct unit is counted once. */
    tok_cache = locks_alloc((size_t)g->n_units, sizeof *tok_cache);
    int32_t cap_units = 1024;
    cum = locks_alloc((size_t)cap_units + 1, sizeof *cum);
    if (!tok_cache || !cum) {
        st = LOCKS_ERR_OOM;
        goto done;
    }
    for (int32_t i = 0; i < g->n_units; i++) tok_cache[i] = -1;
    int32_t m = 0;
    cum[0] = 0;
    for (;;) {
        int32_t ui = (g->first + m) % g->n_units;
        if (tok_cache[ui] < 0) {
            tok_cache[ui] = count_tokens(g, g->units[ui].s, (size_t)g->units[ui].len);
            if (tok_cache[ui] < 0) {
                st = LOCKS_ERR_FORMAT;
                goto done;
            }
        }
        if (cum[m] + tok_cache[ui] > room) break;
        if (m == cap_units) {
            int64_t *c2 = locks_alloc((size_t)cap_units * 2 + 1, sizeof *c2);
            if (!c2) {
                st = LOCKS_ERR_OOM;
                goto done;
            }
            memcpy(c2, cum, ((size_t)cap_units + 1) * sizeof *cum);
            locks_free(cum);
            cum = c2;
            cap_units *= 2;
        }
        cum[m + 1] = cum[m] + tok_cache[ui];
        m++;
    }

    /* Assemble and drop trailing units until the whole prompt fits. */
    for (;;) {
        st = assemble(g, m, cum, &b, t);
        if (st) goto done;
        int32_t n = count_tokens(g, b.s, b.len);
        if (n < 0) {
            st = LOCKS_ERR_FORMAT;
            goto done;
        }
        if (n <= p->n_tokens || m == 0) {
            t->n_tokens = n;
            break;
        }
        m--;
    }
    t->haystack_tokens = (int32_t)cum[m];
    t->prompt = b.s;
    t->prompt_len = b.len;
    b.s = NULL;
done:
    locks_free(b.s);
    locks_free(cum);
    locks_free(tok_cache);
    return st;
}

/* ---------------------------------------------------------------------------------- */
/* Frequent-word extraction                                                           */
/* ---------------------------------------------------------------------------------- */

static locks_status set_answer(locks_task *t, int i, const char *s) {
    t->answers[i] = dup_str(s);
    if (!t->answers[i]) return LOCKS_ERR_OOM;
    if (i + 1 > t->n_answers) t->n_answers = i + 1;
    return LOCKS_OK;
}

#define FWE_VOCAB 64
#define FWE_ALPHA 2.0

/* Writes the FWE prompt holding the first m words of seq into b (from empty) and its
 * token count into *n_tok; m = 0 gives the fixed part alone. */
/* Needle i of the multi-value / multi-query tasks: " One of the special magic numbers for
 * KEY is: VAL.", a carrier whose expected answer i is VAL. */
static locks_status magic_needle(gen_t *g, locks_task *t, int i, const char *key, const char *val) {
    snprintf(g->needle_text[i], sizeof g->needle_text[i], " One of the special magic numbers for %s is: %s.", key,
             val);
    g->carrier[i] = 1;
    return set_answer(t, i, val);
}

/* Their question and answer prefix: every magic number for WHO (a key, or a list). */
static void ask_all_numbers(gen_t *g, const char *who) {
    snprintf(g->question, sizeof g->question,
             "\nWhat are all the special magic numbers for %s mentioned in the provided text?", who);
    snprintf(g->answer_prefix, sizeof g->answer_prefix,
             "The special magic numbers for %s mentioned in the provided text are", who);
}

static locks_status fwe_assemble(const gen_t *g, sbuf *b, const char (*words)[48],
                                 const int32_t *seq, int32_t m, int32_t *n_tok) {
    const locks_task_params *p = g->p;
    b->len = 0;
    sb_str(b, p->prompt_pre);
    sb_str(b, g->instruction);
    for (int32_t i = 0; i < m; i++) {
        sb_put(b, " ", 1);
        sb_str(b, words[seq[i]]);
    }
    sb_str(b, g->question);
    sb_str(b, p->prompt_post);
    sb_str(b, g->answer_prefix);
    if (b->oom) return LOCKS_ERR_OOM;
    *n_tok = count_tokens(g, b->s, b->len);
    return *n_tok < 0 ? LOCKS_ERR_FORMAT : LOCKS_OK;
}

/* The coded text is a sequence of words drawn from a Zipf(alpha) law over FWE_VOCAB
 * random lowercase words; the answers are the three most frequent words of the text
 * actually emitted, and the draw is repeated (next seed) until the top four counts
 * are strictly ordered, so the answer is unambiguous. */
static locks_status build_fwe(gen_t *g, rng_t *r, locks_task *t) {
    const locks_task_params *p = g->p;
    char words[FWE_VOCAB][48];
    int32_t wtok[FWE_VOCAB];
    double cdf[FWE_VOCAB];
    locks_status st = LOCKS_OK;
    sbuf b = {0};
    int32_t *seq = NULL;

    for (int i = 0; i < FWE_VOCAB; i++) {
        for (;;) {
            int len = 4 + (int)rng_below(r, 3);
            for (int k = 0; k < len; k++) words[i][k] = (char)('a' + rng_below(r, 26));
            words[i][len] = 0;
            int dup = 0;
            for (int j = 0; j < i; j++) dup |= !strcmp(words[j], words[i]);
            if (!dup) break;
        }
    }
    double z = 0;
    for (int i = 0; i < FWE_VOCAB; i++) z += pow(i + 1, -FWE_ALPHA);
    double acc = 0;
    for (int i = 0; i < FWE_VOCAB; i++) {
        acc += pow(i + 1, -FWE_ALPHA) / z;
        cdf[i] = acc;
    }
    for (int i = 0; i < FWE_VOCAB; i++) {
        char tmp[52];
        int n = snprintf(tmp, sizeof tmp, " %s", words[i]);
        wtok[i] = count_tokens(g, tmp, (size_t)n);
        if (wtok[i] < 0) return LOCKS_ERR_FORMAT;
    }

    snprintf(g->instruction, sizeof g->instruction,
             "Read the following coded text and track the frequency of each coded word. "
             "Find the three most frequently appeared coded words.\n");
    snprintf(g->question, sizeof g->question,
             "\nQuestion: Do not provide any explanation. What are the three most frequently "
             "appeared words in the above coded text?");
    snprintf(g->answer_prefix, sizeof g->answer_prefix,
             "Answer: According to the coded text above, the three most frequently appeared "
             "words are:");
    int32_t fixed;
    if ((st = fwe_assemble(g, &b, (const char(*)[48])words, NULL, 0, &fixed)) != LOCKS_OK) goto done;
    if (fixed > p->n_tokens) {
        st = LOCKS_ERR_INVALID_ARG;
        goto done;
    }
    int64_t room = p->n_tokens - fixed;
    int32_t cap = (int32_t)room + 1; /* a word has >= 1 token */
    seq = locks_alloc((size_t)cap, sizeof *seq);
    if (!seq) {
        st = LOCKS_ERR_OOM;
        goto done;
    }
    int32_t counts[FWE_VOCAB];
    int32_t m = 0;
    for (int attempt = 0;; attempt++) {
        if (attempt == 64) {
            st = LOCKS_ERR_INVALID_ARG; /* budget too small for a clear top three */
            goto done;
        }
        /* Draw words while their separate counts fit the room. */
        int64_t used = 0;
        m = 0;
        for (;;) {
            double u = rng_unit(r);
            int w = 0;
            while (w < FWE_VOCAB - 1 && cdf[w] < u) w++;
            if (used + wtok[w] > room || m == cap) break;
            used += wtok[w];
            seq[m++] = w;
        }
        /* Assemble, dropping trailing words while the whole prompt is over budget. */
        for (;;) {
            int32_t n;
            if ((st = fwe_assemble(g, &b, (const char(*)[48])words, seq, m, &n)) != LOCKS_OK) goto done;
            if (n <= p->n_tokens || m == 0) {
                t->n_tokens = n;
                break;
            }
            m--;
        }
        /* Rank the words of the final text by count; require a strict top four. */
        memset(counts, 0, sizeof counts);
        for (int32_t i = 0; i < m; i++) counts[seq[i]]++;
        int order[FWE_VOCAB];
        for (int i = 0; i < FWE_VOCAB; i++) order[i] = i;
        for (int i = 1; i < FWE_VOCAB; i++)
            for (int j = i; j > 0 && counts[order[j]] > counts[order[j - 1]]; j--) {
                int tmp = order[j];
                order[j] = order[j - 1];
                order[j - 1] = tmp;
            }
        if (counts[order[0]] > counts[order[1]] && counts[order[1]] > counts[order[2]] &&
            counts[order[2]] > counts[order[3]]) {
            for (int i = 0; i < 3; i++) {
                st = set_answer(t, i, words[order[i]]);
                if (st) goto done;
            }
            break;
        }
    }
    t->haystack_tokens = 0;
    for (int32_t i = 0; i < m; i++) t->haystack_tokens += wtok[seq[i]];
    t->prompt = b.s;
    t->prompt_len = b.len;
    b.s = NULL;
    t->n_needles = 0;
    t->max_gen = 24;
done:
    locks_free(b.s);
    locks_free(seq);
    return st;
}

/* ---------------------------------------------------------------------------------- */
/* Entry points                                                                       */
/* ---------------------------------------------------------------------------------- */

void locks_task_free(locks_task *t) {
    if (!t) return;
    locks_free(t->prompt);
    for (int i = 0; i < LOCKS_TASK_MAX_ANSWERS; i++) locks_free(t->answers[i]);
    memset(t, 0, sizeof *t);
}

static const char NIAH_INSTRUCTION[] =
    "Some special magic numbers are hidden within the following text. Make sure to memorize "
    "it. I will quiz you about the numbers afterwards.\n";

/* Writes the task-specific text (instruction, needles, question, answers) into g and t. */
static locks_status describe_task(gen_t *g, rng_t *r, locks_task *t) {
    const locks_task_params *p = g->p;
    char used[LOCKS_TASK_MAX_NEEDLES * 2][48];
    int n_used = 0;
    char key[48], val[48];
    locks_status st = LOCKS_OK;

    switch (p->kind) {
    case LOCKS_TASK_PASSKEY:
        pick_number(r, 5, used, 0, val);
        snprintf(g->instruction, sizeof g->instruction,
                 "There is an important info hidden inside a lot of irrelevant text. Find it and "
                 "memorize it. I will quiz you about the important information there.\n");
        snprintf(g->needle_text[0], sizeof g->needle_text[0],
                 " The pass key is %s. Remember it. %s is the pass key.", val, val);
        g->carrier[0] = 1;
        g->n_needles = 1;
        snprintf(g->question, sizeof g->question, "\nWhat is the pass key?");
        snprintf(g->answer_prefix, sizeof g->answer_prefix, "The pass key is");
        st = set_answer(t, 0, val);
        t->max_gen = 10;
        break;

    case LOCKS_TASK_NIAH_SINGLE:
    case LOCKS_TASK_NIAH_MULTIKEY: {
        int n = p->kind == LOCKS_TASK_NIAH_SINGLE ? 1 : p->n_keys;
        if (n < 1 || n > LOCKS_TASK_MAX_NEEDLES) return LOCKS_ERR_INVALID_ARG;
        snprintf(g->instruction, sizeof g->instruction, "%s", NIAH_INSTRUCTION);
        char asked[48] = {0};
        for (int i = 0; i < n; i++) {
            pick_key(r, used, n_used, key);
            snprintf(used[n_used++], 48, "%s", key);
            pick_number(r, 7, used, n_used, val);
            snprintf(used[n_used++], 48, "%s", val);
            snprintf(g->needle_text[i], sizeof g->needle_text[i],
                     " One of the special magic numbers for %s is: %s.", key, val);
            g->carrier[i] = i == 0;
            if (i == 0) {
                snprintf(asked, sizeof asked, "%s", key);
                st = set_answer(t, 0, val);
                if (st) return st;
            }
        }
        g->n_needles = n;
        snprintf(g->question, sizeof g->question,
                 "\nWhat is the special magic number for %s mentioned in the provided text?", asked);
        snprintf(g->answer_prefix, sizeof g->answer_prefix,
                 "The special magic number for %s mentioned in the provided text is", asked);
        t->max_gen = 14;
        break;
    }

    case LOCKS_TASK_NIAH_MULTIVALUE: {
        int n = p->n_values;
        if (n < 1 || n > LOCKS_TASK_MAX_ANSWERS) return LOCKS_ERR_INVALID_ARG;
        snprintf(g->instruction, sizeof g->instruction, "%s", NIAH_INSTRUCTION);
        pick_key(r, used, 0, key);
        for (int i = 0; i < n; i++) {
            pick_number(r, 7, used, n_used, val);
            snprintf(used[n_used++], 48, "%s", val);
            if ((st = magic_needle(g, t, i, key, val))) return st;
        }
        g->n_needles = n;
        ask_all_numbers(g, key);
        t->max_gen = 12 * n;
        break;
    }

    case LOCKS_TASK_NIAH_MULTIQUERY: {
        int n = p->n_queries;
        if (n < 1 || n > LOCKS_TASK_MAX_ANSWERS) return LOCKS_ERR_INVALID_ARG;
        snprintf(g->instruction, sizeof g->instruction, "%s", NIAH_INSTRUCTION);
        char keys[LOCKS_TASK_MAX_ANSWERS][48];
        for (int i = 0; i < n; i++) {
            pick_key(r, used, n_used, keys[i]);
            snprintf(used[n_used++], 48, "%s", keys[i]);
            pick_number(r, 7, used, n_used, val);
            snprintf(used[n_used++], 48, "%s", val);
            if ((st = magic_needle(g, t, i, keys[i], val))) return st;
        }
        g->n_needles = n;
        char list[400];
        size_t k = 0;
        for (int i = 0; i < n; i++)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", keys[i],
                                  i + 2 < n ? ", " : (i + 2 == n ? " and " : ""));
        ask_all_numbers(g, list);
        t->max_gen = 12 * n;
        break;
    }

    case LOCKS_TASK_VT: {
        int n = p->n_hops + 1;
        if (p->n_hops < 0 || n > LOCKS_TASK_MAX_NEEDLES || n > LOCKS_TASK_MAX_ANSWERS)
            return LOCKS_ERR_INVALID_ARG;
        pick_number(r, 5, used, 0, val);
        char names[LOCKS_TASK_MAX_NEEDLES][48];
        for (int i = 0; i < n; i++) {
            pick_upper_name(r, names, i, names[i]);
            if (i == 0)
                snprintf(g->needle_text[i], sizeof g->needle_text[i], " VAR %.40s = %.40s.", names[i],
                         val);
            else
                snprintf(g->needle_text[i], sizeof g->needle_text[i], " VAR %.40s = VAR %.40s.",
                         names[i], names[i - 1]);
            g->carrier[i] = 1;
            st = set_answer(t, i, names[i]);
            if (st) return st;
        }
        g->n_needles = n;
        g->ordered = 1;
        snprintf(g->instruction, sizeof g->instruction,
                 "Memorize and track the chain(s) of variable assignment hidden in the following "
                 "text.\n");
        snprintf(g->question, sizeof g->question,
                 "\nQuestion: Find all variables that are assigned the value %s in the text above.",
                 val);
        snprintf(g->answer_prefix, sizeof g->answer_prefix,
                 "Answer: According to the chain(s) of variable assignment in the text above, %d "
                 "variables are assigned the value %s, they are:",
                 n, val);
        t->max_gen = 6 * n;
        break;
    }

    default: return LOCKS_ERR_INVALID_ARG;
    }
    return st;
}

locks_status locks_task_generate(const locks_task_params *p, locks_task *out) {
    if (!out) return LOCKS_ERR_INVALID_ARG;
    memset(out, 0, sizeof *out);
    if (!p || !p->count || p->kind < 0 || p->kind >= LOCKS_TASK_COUNT || p->n_tokens <= 0 ||
        !(p->depth >= 0.0f && p->depth <= 1.0f))
        return LOCKS_ERR_INVALID_ARG;
    locks_haystack_kind hk = locks_task_haystack(p->kind, p->haystack);
    if (hk == LOCKS_HAYSTACK_PROSE && p->kind != LOCKS_TASK_FWE && (!p->prose || !p->prose_len))
        return LOCKS_ERR_INVALID_ARG;

    gen_t *g = locks_alloc(1, sizeof *g);
    if (!g) return LOCKS_ERR_OOM;
    g->p = p;
    rng_t r = {p->seed * 0x2545F4914F6CDD1Dull + (uint64_t)p->kind};
    out->kind = p->kind;
    out->haystack = hk;
    locks_status st = LOCKS_OK;
    char *prose = NULL;
    unit_t *units = NULL;

    if (p->kind == LOCKS_TASK_FWE) {
        st = build_fwe(g, &r, out);
        goto done;
    }
    st = describe_task(g, &r, out);
    if (st) goto done;
    for (int32_t i = 0; i < g->n_needles; i++) g->rand_pos[i] = rng_unit(&r);

    if (hk == LOCKS_HAYSTACK_NOISE) {
        units = locks_alloc(N_NOISE, sizeof *units);
        if (!units) {
            st = LOCKS_ERR_OOM;
            goto done;
        }
        for (int i = 0; i < N_NOISE; i++) {
            units[i].s = NOISE[i];
            units[i].len = (int32_t)strlen(NOISE[i]);
        }
        g->units = units;
        g->n_units = N_NOISE;
        g->first = 0;
    } else {
        size_t plen = 0;
        prose = normalize_prose(p->prose, p->prose_len, &plen);
        int32_t cap = (int32_t)(plen / 8 + 16);
        units = locks_alloc((size_t)cap, sizeof *units);
        if (!prose || !units) {
            st = LOCKS_ERR_OOM;
            goto done;
        }
        g->n_units = split_prose(prose, plen, units, cap);
        if (g->n_units < 4) {
            locks_log(LOCKS_LOG_ERROR, "tasks: the prose haystack has only %d sentences",
                      g->n_units);
            st = LOCKS_ERR_INVALID_ARG;
            goto done;
        }
        g->units = units;
        g->first = (int32_t)rng_below(&r, (uint32_t)g->n_units);
    }
    st = build_haystack_sample(g, out);
    if (st) goto done;

    /* Token spans of the needles: count the prefix up to each end. */
    for (int32_t i = 0; i < out->n_needles; i++) {
        locks_task_needle *nd = &out->needles[i];
        nd->tok_begin = count_tokens(g, out->prompt, nd->byte_begin);
        nd->tok_end = count_tokens(g, out->prompt, nd->byte_end);
        if (nd->tok_begin < 0 || nd->tok_end < 0) {
            st = LOCKS_ERR_FORMAT;
            goto done;
        }
    }
done:
    locks_free(prose);
    locks_free(units);
    locks_free(g);
    if (st) locks_task_free(out);
    return st;
}

/* ---------------------------------------------------------------------------------- */
/* Scoring                                                                            */
/* ---------------------------------------------------------------------------------- */

static int contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    if (n == 0) return 1;
    for (const char *h = hay; *h; h++) {
        size_t k = 0;
        while (k < n && h[k] && tolower((unsigned char)h[k]) == tolower((unsigned char)needle[k]))
            k++;
        if (k == n) return 1;
    }
    return 0;
}

double locks_task_score(const locks_task *t, const char *output) {
    if (!t || !output || t->n_answers <= 0) return 0.0;
    int hit = 0;
    for (int32_t i = 0; i < t->n_answers; i++) hit += contains_nocase(output, t->answers[i]);
    return (double)hit / (double)t->n_answers;
}
