/*
 * cmd_demo.c — `locks demo`: needle in a haystack on a real model, full attention vs
 * LOCKS.
 *
 * A ~4K-token haystack of generated prose (deterministic, nothing downloaded) hides one
 * sentence holding a passphrase; a ChatML question asks for it. The prompt is prefilled
 * once (dense causal attention, batched) and the answer decoded greedily twice from it:
 * with every page (`full`), then, after truncating the session back to the prompt, with
 * the chosen selector at a small token budget (`locks`, 256 by default). Both answers are printed with their decode speed and
 * the KV bytes each decode step read.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "locks_model.h"
#include "runutil.h"
#include "util.h"

#define NEEDLE_CODE "ORCHID-7319"

static void usage(FILE *f) {
    fprintf(f,
            "usage: locks demo [options]\n"
            "\n"
            "Needle in a haystack: a passphrase hidden in ~N tokens of prose, answered with\n"
            "full attention and with a sparse selector at a small budget.\n"
            "\n"
            "  -m FILE          GGUF model (default: the one scripts/fetch-model.sh fetches)\n"
            "  -c N             haystack size in tokens (default 4096)\n"
            "  --depth X        needle position as a fraction of the haystack (default 0.4)\n"
            "  --selector NAME  sparse selector (default locks)\n"
            "  --budget N       its token budget per KV head (default 256)\n"
            "  --sink N         leading pages always attended (default 1)\n"
            "  --recent N       trailing pages always attended (default 1)\n"
            "  --rank R         summary rank (default 8)\n"
            "  -n N             max answer tokens (default 24)\n"
            "  -t N             threads (default 2)\n"
            "  --backend NAME   cpu|cuda: cuda runs the model on the GPU (weights dequantized to\n"
            "                   fp16 at load; selectors full and locks) (default cpu)\n"
            "  -h, --help       this text\n");
}

/* ================================================================================ */
/* The haystack                                                                     */
/* ================================================================================ */

static const char *const subj[] = {
    "The old fisherman", "A young teacher", "The village baker", "My neighbour", "The night guard",
    "A tired traveller", "The river pilot", "Our librarian", "The shy painter", "A retired sailor",
    "The market vendor", "The gardener", "A quiet student", "The blacksmith", "The mayor's clerk",
};
static const char *const verb[] = {
    "repaired", "painted", "carried", "sold", "found", "described", "borrowed", "cleaned",
    "measured", "photographed", "wrapped", "counted", "polished", "hid", "weighed",
};
static const char *const obj[] = {
    "a wooden boat", "three copper kettles", "an old map", "a basket of pears", "the broken clock",
    "a pile of letters", "two brass lanterns", "the winter coats", "a box of candles",
    "a faded flag", "the iron gate", "a jar of honey", "a stack of blue plates", "the violin",
};
static const char *const place[] = {
    "near the harbour", "behind the mill", "in the town square", "under the bridge",
    "beside the chapel", "at the train station", "on the hill road", "inside the barn",
    "by the north wall", "next to the bakery", "in the school yard", "along the canal",
};
static const char *const when[] = {
    "before dawn", "after the storm", "on Sunday", "late in the evening", "during the fair",
    "at noon", "in early spring", "while it rained", "before the bells rang", "after supper",
};

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

typedef struct {
    char *p;
    size_t n, cap;
} text;

static int text_add(text *t, const char *s) {
    size_t k = strlen(s);
    if (t->n + k + 1 > t->cap) {
        size_t cap = (t->n + k + 1) * 2;
        char *p = realloc(t->p, cap);
        if (!p) return 0;
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->n, s, k + 1);
    t->n += k;
    return 1;
}

/* Haystack of about n_sent sentences, the needle after sentence needle_at. */
static char *haystack(int n_sent, int needle_at) {
    text t = {0};
    uint64_t s = 20260229;
    char sent[256];
    for (int i = 0; i < n_sent; i++) {
        if (i == needle_at)
            text_add(&t, "The secret passphrase for the archive is " NEEDLE_CODE ". ");
        snprintf(sent, sizeof sent, "%s %s %s %s %s.%s", subj[lcg(&s) % (sizeof subj / sizeof *subj)],
                 verb[lcg(&s) % (sizeof verb / sizeof *verb)], obj[lcg(&s) % (sizeof obj / sizeof *obj)],
                 place[lcg(&s) % (sizeof place / sizeof *place)], when[lcg(&s) % (sizeof when / sizeof *when)],
                 (i % 6 == 5) ? "\n\n" : " ");
        if (!text_add(&t, sent)) {
            free(t.p);
            return NULL;
        }
    }
    return t.p;
}

/* ChatML prompt of the haystack and the question, tokenized. */
static int32_t *build_prompt(const locks_model *m, int n_sent, double depth, int32_t *n) {
    char *hay = haystack(n_sent, (int)(depth * n_sent));
    if (!hay) return NULL;
    const char *q = "\n\nWhat is the secret passphrase for the archive mentioned in the text above? "
                    "Answer with the passphrase only.";
    char *user = malloc(strlen(hay) + strlen(q) + 1);
    if (!user) {
        free(hay);
        return NULL;
    }
    strcpy(user, hay);
    strcat(user, q);
    free(hay);
    locks_chat_msg msgs[2] = {{"system", LOCKS_SMOLLM2_SYSTEM_PROMPT}, {"user", user}};
    size_t need = 0;
    locks_chatml_format(msgs, 2, true, NULL, 0, &need);
    char *chat = malloc(need + 1);
    int32_t *ids = NULL;
    if (chat && locks_chatml_format(msgs, 2, true, chat, need + 1, &need) == LOCKS_OK)
        ids = ru_tokenize(m, chat, 0, 1, n);
    free(chat);
    free(user);
    return ids;
}

/* ================================================================================ */
/* Answering                                                                        */
/* ================================================================================ */

static int32_t argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Greedy answer from the prefill's logits; returns the text (malloc'ed) or NULL. */
static char *answer(locks_ctx *c, const locks_model *m, const float *first_logits, int32_t n_max,
                    locks_status *st) {
    int32_t nv = locks_model_get_info(m).n_vocab;
    float *lg = malloc(sizeof(float) * (size_t)nv);
    ru_stream out = {m, NULL, {{0}, 0}, NULL, 0, 0};
    *st = LOCKS_OK;
    if (!lg) {
        *st = LOCKS_ERR_OOM;
        return NULL;
    }
    memcpy(lg, first_logits, sizeof(float) * (size_t)nv);
    for (int32_t i = 0; i < n_max; i++) {
        int32_t tok = argmax(lg, nv);
        if (locks_tokenizer_is_eog(locks_model_tokenizer(m), tok)) break;
        ru_stream_token(&out, tok);
        if (i + 1 == n_max) break;
        if ((*st = locks_ctx_decode(c, tok, lg)) != LOCKS_OK) break;
    }
    ru_stream_end(&out);
    free(lg);
    if (!out.text) out.text = calloc(1, 1);
    return out.text;
}

static void report(const char *label, const char *ans, const locks_run_stats *s) {
    double steps = s->n_decode > 0 ? s->n_decode : 1;
    double read = ((double)s->bytes_meta + (double)s->bytes_kv) / steps;
    double dense = (double)s->bytes_dense / steps;
    printf("%-22s \"%s\"  [%s]\n", label, ans, strstr(ans, NEEDLE_CODE) ? "found the needle" : "missed");
    printf("%-22s decode %.1f tok/s (%.1f ms/token, attention %.2f ms; %.1f CPU-ms/token)\n", "",
           s->n_decode / (s->decode_ms / 1e3), s->decode_ms / steps, s->attn_ms / steps, s->decode_cpu_ms / steps);
    printf("%-22s KV bytes read per step %.2f MB vs dense %.2f MB (%.1f%%)\n", "", read / 1e6, dense / 1e6,
           dense > 0 ? 100.0 * read / dense : 0.0);
}

static int parse_int(const char *s, int32_t lo, int32_t hi, int32_t *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) return 0;
    *out = (int32_t)v;
    return 1;
}

int cmd_demo(int argc, char **argv) {
    const char *model_path = NULL;
    int32_t target = 4096, n_max = 24, n_threads = 2, rank = 8;
    locks_backend backend = LOCKS_BACKEND_CPU;
    double depth = 0.4;
    locks_step_params sparse = locks_step_default_params();
    sparse.selector = LOCKS_SEL_LOCKS;
    sparse.budget = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "locks demo: unknown option or missing value: %s\n", a);
            return 2;
        }
        if (!strcmp(a, "-m")) model_path = v;
        else if (!strcmp(a, "-c")) ok = parse_int(v, 256, 1 << 20, &target);
        else if (!strcmp(a, "-n")) ok = parse_int(v, 1, 4096, &n_max);
        else if (!strcmp(a, "-t")) ok = parse_int(v, 1, 256, &n_threads);
        else if (!strcmp(a, "--rank")) ok = parse_int(v, 1, LOCKS_MAX_RANK, &rank);
        else if (!strcmp(a, "--budget")) ok = parse_int(v, 1, INT32_MAX, &sparse.budget);
        else if (!strcmp(a, "--sink")) ok = parse_int(v, 0, 1 << 20, &sparse.n_sink);
        else if (!strcmp(a, "--recent")) ok = parse_int(v, 0, 1 << 20, &sparse.n_recent);
        else if (!strcmp(a, "--selector")) ok = locks_selector_parse(v, &sparse.selector) == LOCKS_OK;
        else if (!strcmp(a, "--backend")) {
            ok = !strcmp(v, "cpu") || !strcmp(v, "cuda");
            backend = !strcmp(v, "cuda") ? LOCKS_BACKEND_CUDA : LOCKS_BACKEND_CPU;
        } else if (!strcmp(a, "--depth")) {
            char *end;
            depth = strtod(v, &end);
            ok = *end == '\0' && depth >= 0.0 && depth <= 1.0;
        } else {
            fprintf(stderr, "locks demo: unknown option '%s' (--help lists them)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "locks demo: bad value '%s' for %s\n", v, a);
            return 2;
        }
        i++;
    }
    ru_log_to_stderr(0);

    int rc = 1;
    int32_t *toks = NULL;
    float *logits = NULL;
    char *ans_full = NULL, *ans_sparse = NULL;
    locks_ctx *full = NULL;
    locks_model *m = ru_load_model(model_path);
    if (!m) return 1;
    locks_model_info in = locks_model_get_info(m);

    /* size the haystack: scale the sentence count until the prompt is just under target */
    int n_sent = target / 17;
    int32_t n = 0;
    for (int tries = 0; tries < 6; tries++) {
        free(toks);
        toks = build_prompt(m, n_sent, depth, &n);
        if (!toks) goto done;
        if (n <= target && n > target - 24) break;
        int next = (int)((double)n_sent * (target - 12) / n);
        if (next == n_sent) next += n < target ? 1 : -1;
        n_sent = next;
    }
    if (n > target) { /* still over: drop a sentence at a time */
        while (n > target && n_sent > 1) {
            free(toks);
            toks = build_prompt(m, --n_sent, depth, &n);
            if (!toks) goto done;
        }
    }
    printf("needle in a haystack: %d prompt tokens, needle at %.0f%% depth: \"...passphrase for the archive is %s...\"\n",
           n, depth * 100, NEEDLE_CODE);
    fflush(stdout);

    locks_ctx_params cp = locks_ctx_default_params();
    cp.n_ctx = n + n_max;
    cp.swa_rollback = n_max + 1; /* back to the prompt after the full answer */
    cp.n_threads = n_threads;
    cp.rank = rank;
    cp.progress = ru_progress;
    cp.step.selector = LOCKS_SEL_FULL;
    cp.step.budget = cp.n_ctx;
    cp.selectors = LOCKS_SEL_BIT(sparse.selector); /* switched to after the full answer */

    cp.backend = backend;
    locks_status st;
    full = locks_ctx_init(m, cp, &st);
    logits = malloc(sizeof(float) * (size_t)in.n_vocab);
    if (!full || !logits) {
        fprintf(stderr, "locks demo: cannot create the context: %s\n", tool_why(st));
        goto done;
    }
    if ((st = locks_ctx_prefill(full, toks, n, logits)) != LOCKS_OK) {
        fprintf(stderr, "locks demo: prefill failed: %s\n", tool_why(st));
        goto done;
    }
    locks_run_stats ps = locks_ctx_stats(full);
    printf("prefill (dense, once for both): %d tokens in %.1f s (%.1f tok/s, %d threads; %.1f CPU-s)\n",
           ps.n_prefill, ps.prefill_ms / 1e3, ps.n_prefill / (ps.prefill_ms / 1e3), n_threads,
           ps.prefill_cpu_ms / 1e3);
    fflush(stdout);

    /* full attention first, then back to the prompt (truncate) and the sparse selector */
    locks_ctx_stats_reset(full);
    ans_full = answer(full, m, logits, n_max, &st);
    if (st != LOCKS_OK) fprintf(stderr, "locks demo: full decode failed: %s\n", tool_why(st));
    locks_run_stats fs = locks_ctx_stats(full);
    if ((st = locks_ctx_truncate(full, n)) != LOCKS_OK || (st = locks_ctx_set_step(full, sparse)) != LOCKS_OK) {
        fprintf(stderr, "locks demo: cannot return to the prompt: %s\n", tool_why(st));
        goto done;
    }
    locks_ctx_stats_reset(full);
    ans_sparse = answer(full, m, logits, n_max, &st);
    if (st != LOCKS_OK) fprintf(stderr, "locks demo: %s decode failed: %s\n", locks_selector_name(sparse.selector), tool_why(st));
    if (!ans_full || !ans_sparse) goto done;

    char label[64];
    locks_run_stats ss = locks_ctx_stats(full);
    printf("\n");
    report("full attention:", ans_full, &fs);
    snprintf(label, sizeof label, "%s @ budget %d:", locks_selector_name(sparse.selector), sparse.budget);
    report(label, ans_sparse, &ss);
    rc = 0;
done:
    free(ans_full);
    free(ans_sparse);
    free(logits);
    free(toks);
    locks_ctx_free(full);
    locks_model_free(m);
    return rc;
}
