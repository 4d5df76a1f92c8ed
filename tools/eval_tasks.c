/*
 * eval_tasks.c — `locks eval --tasks ...`: long-context tasks on the real model, answered
 * by every selector and budget from one dense prefill.
 *
 * For each sample (task, context length, sample index):
 *   1. generate the prompt (src/eval/tasks.c), sized with the model's own tokenizer and
 *      wrapped in the model's chat template;
 *   2. prefill all but its last token with dense attention (once);
 *   3. for each (selector, budget): decode the last prompt token and then the greedy
 *      answer through that selector, so every answer token comes from a sparse step;
 *      score the answer as RULER does (each expected answer contained, case-insensitive);
 *      at each measured decode step and layer compare the selection with the float64
 *      reference attention (src/eval/metrics.h): mass coverage of the selection and of the
 *      oracle's at the same budget, and carrier recall (pages holding an answer needle);
 *   4. truncate the sequence back to the prefill (locks_ctx_truncate), so the next
 *      configuration starts from exactly the same KV cache.
 * `full` ignores the budget and runs once per sample (budget 0 in the records).
 *
 * Results are appended to a JSONL file, one line per (sample, selector, budget), flushed
 * as they come; a rerun skips what the file already holds for the same settings, so an
 * interrupted sweep resumes. Progress goes to stderr; the summary (a table, or JSON with
 * --json) to stdout. scripts/eval-report.py turns the JSONL into eval/RESULTS.md.
 */
#define _POSIX_C_SOURCE 200809L

#include "eval_tasks.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "locks.h"
#include "locks_model.h"
#include "eval/metrics.h"
#include "eval/tasks.h"
#include "util.h"
#include "cmds.h"

#define MAX_LIST 32
#define CHECKM(cond, ...)                                                                    \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "locks eval: " __VA_ARGS__);                                     \
            fputc('\n', stderr);                                                             \
            goto fail;                                                                       \
        }                                                                                    \
    } while (0)

/* ================================================================================ */
/* Options                                                                          */
/* ================================================================================ */

typedef struct {
    const char *model_path;
    const char *out_path;
    const char *prose_path;
    locks_task_kind tasks[LOCKS_TASK_COUNT];
    int n_tasks;
    locks_selector sels[LOCKS_SEL_COUNT];
    int n_sels;
    int32_t budgets[MAX_LIST];
    int n_budgets;
    int32_t contexts[MAX_LIST];
    int n_contexts;
    int32_t samples;
    uint64_t seed;
    locks_haystack_kind haystack;
    int32_t threads, rank, sink, recent;
    locks_summary_prec prec;
    int chat, json;
    int32_t max_gen;      /* 0: the task's own */
    int32_t metric_steps; /* decode steps measured per answer; < 0: all */
} opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: locks eval --tasks LIST [options]\n"
            "\n"
            "Long-context tasks (RULER style) on a GGUF model: one dense prefill per sample,\n"
            "then the answer decoded with every selector and budget. Results are appended\n"
            "to a JSONL file (resumable); see eval/README.md.\n"
            "\n"
            "  --tasks LIST        passkey,niah_single,niah_multikey,niah_multivalue,\n"
            "                      niah_multiquery,vt,fwe or all\n"
            "  -m, --model FILE    GGUF model (default: $LOCKS_MODEL or the fetched\n"
            "                      SmolLM2-135M-Instruct, see scripts/fetch-model.sh)\n"
            "  --selectors LIST    default full,oracle,locks,quest,shadow,rocket\n"
            "  --budgets LIST      token budgets (default 64,128,256,512,1024)\n"
            "  --contexts LIST     prompt lengths in tokens, K suffix ok (default 2K,4K,8K)\n"
            "  --samples N         samples per (task, context) (default 10)\n"
            "  --seed N            base seed (default 1)\n"
            "  --haystack KIND     auto|noise|prose (default auto: RULER's choice per task)\n"
            "  --prose FILE        prose haystack (default: scripts/fetch-haystack.sh's file)\n"
            "  -o, --out FILE      JSONL results, appended and resumed (default eval-tasks.jsonl)\n"
            "  -t, --threads N     threads (default: online CPUs)\n"
            "  --rank R            summary rank (default 8)\n"
            "  --summary q|f32     summary precision (default q)\n"
            "  --sink N --recent N forced leading / trailing pages (default 1 / 1)\n"
            "  --max-gen N         answer tokens (default: per task)\n"
            "  --metric-steps N    decode steps measured per answer (default all; -1 all)\n"
            "  --no-chat           plain prompt instead of the ChatML template\n"
            "  --json              summary as JSON on stdout\n");
}

static int split_list(const char *s, char out[][64], int cap) {
    int n = 0;
    const char *p = s;
    while (*p && n < cap) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len >= 64) return -1;
        memcpy(out[n], p, len);
        out[n][len] = 0;
        if (len) n++;
        if (!e) break;
        p = e + 1;
    }
    return n;
}

static int parse_int(const char *s, int32_t *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || errno) return -1;
    if (*end == 'k' || *end == 'K') {
        v *= 1024;
        end++;
    }
    if (*end || v < -2147483647L || v > 2147483647L) return -1;
    *out = (int32_t)v;
    return 0;
}

static int parse_int_list(const char *s, int32_t *out, int *n, int min) {
    char items[MAX_LIST][64];
    int k = split_list(s, items, MAX_LIST);
    if (k <= 0) return -1;
    for (int i = 0; i < k; i++)
        if (parse_int(items[i], &out[i]) || out[i] < min) return -1;
    *n = k;
    return 0;
}

static const char *default_model_path(char *buf, size_t cap) {
    const char *env = getenv("LOCKS_MODEL");
    if (env && *env) return env;
    locks_model_default_path(buf, cap);
    return buf;
}

static const char *default_prose_path(char *buf, size_t cap) {
    const char *dir = getenv("LOCKS_HAYSTACK_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (dir && *dir) snprintf(buf, cap, "%s/prose.txt", dir);
    else if (xdg && *xdg) snprintf(buf, cap, "%s/locks/haystack/prose.txt", xdg);
    else snprintf(buf, cap, "%s/.cache/locks/haystack/prose.txt", home ? home : ".");
    return buf;
}

/* Returns 0, or 2 for a usage error (message printed). */
static int parse_opts(int argc, char **argv, opts *o) {
    static char model_buf[1024], prose_buf[1024];
    memset(o, 0, sizeof *o);
    o->out_path = "eval-tasks.jsonl";
    o->n_sels = 0;
    const locks_selector dsel[] = {LOCKS_SEL_FULL,  LOCKS_SEL_ORACLE, LOCKS_SEL_LOCKS,
                                   LOCKS_SEL_QUEST, LOCKS_SEL_SHADOW, LOCKS_SEL_ROCKET};
    for (int i = 0; i < 6; i++) o->sels[o->n_sels++] = dsel[i];
    const int32_t dbud[] = {64, 128, 256, 512, 1024};
    for (int i = 0; i < 5; i++) o->budgets[o->n_budgets++] = dbud[i];
    const int32_t dctx[] = {2048, 4096, 8192};
    for (int i = 0; i < 3; i++) o->contexts[o->n_contexts++] = dctx[i];
    o->samples = 10;
    o->seed = 1;
    o->haystack = LOCKS_HAYSTACK_AUTO;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = ncpu > 0 ? (int32_t)ncpu : 1;
    o->rank = 8;
    o->sink = 1;
    o->recent = 1;
    o->prec = LOCKS_SUMMARY_Q;
    o->chat = 1;
    o->metric_steps = -1;
    int have_tasks = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV()                                                                              \
    do {                                                                                     \
        if (!v) {                                                                            \
            fprintf(stderr, "locks eval: %s needs a value\n", a);                            \
            return 2;                                                                        \
        }                                                                                    \
        i++;                                                                                 \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--tasks")) {
            NEEDV();
            char items[MAX_LIST][64];
            int k = split_list(v, items, MAX_LIST);
            o->n_tasks = 0;
            for (int j = 0; j < k; j++) {
                if (!strcmp(items[j], "all")) {
                    for (int t = 0; t < LOCKS_TASK_COUNT; t++) o->tasks[o->n_tasks++] = (locks_task_kind)t;
                    break;
                }
                if (o->n_tasks == LOCKS_TASK_COUNT ||
                    locks_task_parse(items[j], &o->tasks[o->n_tasks]) != LOCKS_OK) {
                    fprintf(stderr, "locks eval: unknown task '%s'\n", items[j]);
                    return 2;
                }
                o->n_tasks++;
            }
            have_tasks = o->n_tasks > 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            NEEDV();
            o->model_path = v;
        } else if (!strcmp(a, "--selectors")) {
            NEEDV();
            char items[MAX_LIST][64];
            int k = split_list(v, items, MAX_LIST);
            o->n_sels = 0;
            for (int j = 0; j < k && o->n_sels < LOCKS_SEL_COUNT; j++)
                if (locks_selector_parse(items[j], &o->sels[o->n_sels++]) != LOCKS_OK) {
                    fprintf(stderr, "locks eval: unknown selector '%s'\n", items[j]);
                    return 2;
                }
            if (o->n_sels == 0) return 2;
        } else if (!strcmp(a, "--budgets")) {
            NEEDV();
            if (parse_int_list(v, o->budgets, &o->n_budgets, 1)) {
                fprintf(stderr, "locks eval: bad --budgets '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--contexts")) {
            NEEDV();
            if (parse_int_list(v, o->contexts, &o->n_contexts, 64)) {
                fprintf(stderr, "locks eval: bad --contexts '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--samples")) {
            NEEDV();
            if (parse_int(v, &o->samples) || o->samples < 1) return 2;
        } else if (!strcmp(a, "--seed")) {
            NEEDV();
            o->seed = strtoull(v, NULL, 10);
        } else if (!strcmp(a, "--haystack")) {
            NEEDV();
            if (locks_haystack_parse(v, &o->haystack) != LOCKS_OK) {
                fprintf(stderr, "locks eval: bad --haystack '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--prose")) {
            NEEDV();
            o->prose_path = v;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
            NEEDV();
            o->out_path = v;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            NEEDV();
            if (parse_int(v, &o->threads) || o->threads < 1) return 2;
        } else if (!strcmp(a, "--rank")) {
            NEEDV();
            if (parse_int(v, &o->rank) || o->rank < 1 || o->rank > LOCKS_MAX_RANK) return 2;
        } else if (!strcmp(a, "--summary")) {
            NEEDV();
            if (!strcmp(v, "q")) o->prec = LOCKS_SUMMARY_Q;
            else if (!strcmp(v, "f32")) o->prec = LOCKS_SUMMARY_F32;
            else return 2;
        } else if (!strcmp(a, "--sink")) {
            NEEDV();
            if (parse_int(v, &o->sink) || o->sink < 0) return 2;
        } else if (!strcmp(a, "--recent")) {
            NEEDV();
            if (parse_int(v, &o->recent) || o->recent < 0) return 2;
        } else if (!strcmp(a, "--max-gen")) {
            NEEDV();
            if (parse_int(v, &o->max_gen) || o->max_gen < 1) return 2;
        } else if (!strcmp(a, "--metric-steps")) {
            NEEDV();
            if (parse_int(v, &o->metric_steps)) return 2;
        } else if (!strcmp(a, "--no-chat")) {
            o->chat = 0;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else {
            fprintf(stderr, "locks eval: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
#undef NEEDV
    }
    if (!have_tasks) {
        usage(stderr);
        return 2;
    }
    if (!o->model_path) o->model_path = default_model_path(model_buf, sizeof model_buf);
    if (!o->prose_path) o->prose_path = default_prose_path(prose_buf, sizeof prose_buf);
    return 0;
}

int eval_tasks_wanted(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--tasks")) return 1;
    return 0;
}

/* ================================================================================ */
/* Records: the JSONL file                                                          */
/* ================================================================================ */

typedef struct {
    int task;
    int32_t context, sample, budget;
    int sel;
    double score;
    int64_t c_ev, c_hit;
    double mass, mass_or;
    int has_mass;
    char key[256];
} rec;

typedef struct {
    rec *r;
    int n, cap;
} rec_list;

static int recs_push(rec_list *l, const rec *r) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 256;
        rec *t = realloc(l->r, (size_t)cap * sizeof *t);
        if (!t) return -1;
        l->r = t;
        l->cap = cap;
    }
    l->r[l->n++] = *r;
    return 0;
}

/* The identity of one decode: what must match for a rerun to skip it. */
static void make_key(char *out, size_t cap, const opts *o, const char *task, const char *hay,
                     int32_t context, int32_t sample, const char *sel, int32_t budget) {
    snprintf(out, cap, "%s|%s|%d|%d|%llu|%s|%d|r%d|%s|%d|%d", task, hay, context, sample,
             (unsigned long long)o->seed, sel, budget, o->rank,
             o->prec == LOCKS_SUMMARY_F32 ? "f32" : "q", o->sink, o->recent);
}

static int recs_has(const rec_list *l, const char *key) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->r[i].key, key)) return 1;
    return 0;
}

/* Minimal readers for the flat JSON objects this file writes. */
static const char *jfind(const char *line, const char *name) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", name);
    const char *p = strstr(line, pat);
    return p ? p + strlen(pat) : NULL;
}

static int jstr(const char *line, const char *name, char *out, size_t cap) {
    const char *p = jfind(line, name);
    if (!p || *p != '"') return -1;
    p++;
    size_t k = 0;
    while (*p && *p != '"' && k + 1 < cap) {
        if (*p == '\\' && p[1]) p++;
        out[k++] = *p++;
    }
    out[k] = 0;
    return 0;
}

static int jnum(const char *line, const char *name, double *out) {
    const char *p = jfind(line, name);
    if (!p || !strncmp(p, "null", 4)) return -1;
    char *end;
    *out = strtod(p, &end);
    return end == p ? -1 : 0;
}

/* Loads the records of the file that match this run's settings. */
static int load_records(const opts *o, rec_list *l) {
    FILE *f = fopen(o->out_path, "r");
    if (!f) return 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        char task[64], hay[64], sel[64], prec[16];
        double ctx, sample, seed, budget, rank, sink, recent, score;
        if (jstr(line, "task", task, sizeof task) || jstr(line, "haystack", hay, sizeof hay) ||
            jstr(line, "selector", sel, sizeof sel) || jstr(line, "summary", prec, sizeof prec) ||
            jnum(line, "context", &ctx) || jnum(line, "sample", &sample) ||
            jnum(line, "seed", &seed) || jnum(line, "budget", &budget) ||
            jnum(line, "rank", &rank) || jnum(line, "sink", &sink) ||
            jnum(line, "recent", &recent) || jnum(line, "score", &score))
            continue;
        if ((uint64_t)seed != o->seed || (int32_t)rank != o->rank || (int32_t)sink != o->sink ||
            (int32_t)recent != o->recent ||
            strcmp(prec, o->prec == LOCKS_SUMMARY_F32 ? "f32" : "q"))
            continue;
        rec r;
        memset(&r, 0, sizeof r);
        locks_task_kind tk;
        locks_selector sk;
        if (locks_task_parse(task, &tk) || locks_selector_parse(sel, &sk)) continue;
        r.task = tk;
        r.sel = sk;
        r.context = (int32_t)ctx;
        r.sample = (int32_t)sample;
        r.budget = (int32_t)budget;
        r.score = score;
        double ev = 0, hit = 0, mass, mass_or;
        jnum(line, "carrier_events", &ev);
        jnum(line, "carrier_hits", &hit);
        r.c_ev = (int64_t)ev;
        r.c_hit = (int64_t)hit;
        if (!jnum(line, "mass_cov", &mass) && !jnum(line, "mass_cov_oracle", &mass_or)) {
            r.mass = mass;
            r.mass_or = mass_or;
            r.has_mass = 1;
        }
        make_key(r.key, sizeof r.key, o, task, hay, r.context, r.sample, sel, r.budget);
        if (recs_push(l, &r)) break;
    }
    free(line);
    fclose(f);
    return l->n;
}

/* JSON string body: quotes, backslashes and control bytes escaped; bytes >= 0x80 that
 * are not part of valid UTF-8 are replaced by '?', so the file is always valid UTF-8. */
static void json_escape(FILE *f, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc((int)c, f);
            p++;
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
            p++;
        } else if (c < 0x80) {
            fputc((int)c, f);
            p++;
        } else {
            int len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
            int ok = len > 0;
            for (int k = 1; ok && k < len; k++) ok = (p[k] & 0xC0) == 0x80;
            if (ok) {
                fwrite(p, 1, (size_t)len, f);
                p += len;
            } else {
                fputc('?', f);
                p++;
            }
        }
    }
}

/* ================================================================================ */
/* The run                                                                          */
/* ================================================================================ */

typedef struct {
    const opts *o;
    locks_model *model;
    const locks_tokenizer *tok;
    locks_model_info info;
    locks_ctx *ctx;
    int32_t *ids; /* scratch for tokenizing */
    int32_t ids_cap;
    float *logits;
    char machine[160];
    const char *commit;
    /* metering of the current answer */
    int measure;
    int32_t budget;
    int32_t needle_pages[256];
    int32_t n_needle_pages;
    int32_t *or_pages, *or_n;
    int32_t or_cap;
    locks_carrier_count carrier;
    double mass_sum, mass_or_sum, cos_sum;
    int64_t n_meas;
    locks_status meter_err;
} run;

static int32_t count_cb(const char *text, size_t len, void *user) {
    run *R = user;
    int32_t n = 0;
    if ((size_t)R->ids_cap < len + 1) {
        int32_t cap = (int32_t)len + 1024;
        int32_t *t = realloc(R->ids, (size_t)cap * sizeof *t);
        if (!t) return -1;
        R->ids = t;
        R->ids_cap = cap;
    }
    if (locks_tokenizer_encode(R->tok, text, len, true, R->ids, R->ids_cap, &n) != LOCKS_OK) return -1;
    return n;
}

/* Per-layer hook of a decode step: metrics of the selection just attended. */
static void on_step(int32_t layer, const float *q, int32_t n_q_heads, const locks_selection *sel,
                    void *user) {
    run *R = user;
    if (!R->measure || R->meter_err) return;
    locks_cache *cache = locks_ctx_cache(R->ctx);
    int32_t seq = locks_ctx_seq(R->ctx);
    int32_t hkv = R->info.n_kv_heads;
    locks_kv_src src;
    locks_attn_ref ref;
    memset(&ref, 0, sizeof ref);
    locks_status st = locks_kv_src_cache(cache, seq, locks_ctx_cache_layer(R->ctx, layer), &src);
    if (!st) st = locks_attn_ref_compute(&src, q, n_q_heads, 0.0f, 1, &ref);
    locks_sel_metrics m;
    if (!st)
        st = locks_metrics_eval(&ref, sel->pages, sel->n_pages, sel->max_pages, R->budget,
                                R->o->sink, R->o->recent, NULL, &m);
    if (!st && R->n_needle_pages > 0) {
        if (R->or_cap < hkv * sel->max_pages) {
            free(R->or_pages);
            R->or_cap = hkv * sel->max_pages;
            R->or_pages = malloc((size_t)R->or_cap * sizeof *R->or_pages);
            if (!R->or_pages) {
                R->or_cap = 0;
                st = LOCKS_ERR_OOM;
            }
        }
        if (!st)
            st = locks_metrics_oracle_select(&ref, R->budget, R->o->sink, R->o->recent,
                                             R->or_pages, R->or_n, sel->max_pages);
        if (!st)
            locks_metrics_carrier_add(&R->carrier, hkv, R->or_pages, R->or_n, sel->pages,
                                      sel->n_pages, sel->max_pages, R->needle_pages,
                                      R->n_needle_pages);
    }
    if (!st) {
        R->mass_sum += m.mass_coverage;
        R->mass_or_sum += m.oracle_mass_coverage;
        R->cos_sum += m.cosine;
        R->n_meas++;
    } else {
        R->meter_err = st;
    }
    locks_attn_ref_free(&ref);
}

static void on_prefill(int32_t done, int32_t total, void *user) {
    (void)user;
    if (done == total || (done * 10 / total) != ((done - 1) * 10 / total))
        fprintf(stderr, "\r  prefill %d/%d tokens", done, total);
    if (done == total) fputc('\n', stderr);
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void read_machine(char *out, size_t cap) {
    char model[128] = "unknown cpu";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            if (!strncmp(line, "model name", 10)) {
                char *c = strchr(line, ':');
                if (c) {
                    c++;
                    while (*c == ' ') c++;
                    c[strcspn(c, "\n")] = 0;
                    snprintf(model, sizeof model, "%s", c);
                }
                break;
            }
        }
        fclose(f);
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(out, cap, "%s, %ld cpus", model, n);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t k = fread(buf + n, 1, cap - n - 1, f);
        n += k;
        if (n + 1 < cap) break;
        cap *= 2;
        char *t = realloc(buf, cap);
        if (!t) {
            free(buf);
            buf = NULL;
        }
        buf = t;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

/* Depth of sample i: a low-discrepancy sweep of [0, 1] (golden-ratio steps from 0.5),
 * so any prefix of the samples covers the context evenly. */
static float sample_depth(int32_t i) {
    double d = 0.5 + 0.6180339887498949 * (double)i;
    return (float)(d - floor(d));
}

static uint64_t sample_seed(uint64_t base, int task, int32_t context, int32_t sample) {
    uint64_t z = base * 0x9E3779B97F4A7C15ull ^ ((uint64_t)task << 48) ^ ((uint64_t)context << 20) ^
                 (uint64_t)sample;
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    return z ^ (z >> 29);
}

/* Decodes the answer of one configuration from the prefilled state (n_pre tokens) and
 * writes its record. Returns 0 or -1 (message printed). */
static int answer_one(run *R, const locks_task *t, const int32_t *prompt, int32_t n_prompt,
                      locks_selector sel, int32_t budget, int32_t max_gen, FILE *out,
                      const char *key_hay, int32_t context, int32_t sample, uint64_t seed,
                      float depth, double prefill_ms, rec_list *recs) {
    const opts *o = R->o;
    int32_t n_pre = n_prompt - 1;
    locks_status st = locks_ctx_truncate(R->ctx, n_pre);
    if (st) {
        fprintf(stderr, "locks eval: truncate: %s\n", tool_why(st));
        return -1;
    }
    locks_step_params sp = locks_step_default_params();
    sp.selector = sel;
    sp.budget = sel == LOCKS_SEL_FULL ? n_prompt + max_gen + LOCKS_PAGE : budget;
    sp.n_sink = o->sink;
    sp.n_recent = o->recent;
    if ((st = locks_ctx_set_step(R->ctx, sp))) {
        fprintf(stderr, "locks eval: set_step: %s\n", tool_why(st));
        return -1;
    }
    R->budget = sp.budget;
    memset(&R->carrier, 0, sizeof R->carrier);
    R->mass_sum = R->mass_or_sum = R->cos_sum = 0;
    R->n_meas = 0;
    R->meter_err = LOCKS_OK;

    int32_t gen[512];
    int32_t n_gen = 0;
    int32_t tokid = prompt[n_prompt - 1];
    double t0 = locks_now_ms();
    for (int32_t g = 0; g < max_gen && g < 512; g++) {
        R->measure = sel != LOCKS_SEL_FULL && (o->metric_steps < 0 || g < o->metric_steps);
        st = locks_ctx_decode(R->ctx, tokid, R->logits);
        if (st) {
            fprintf(stderr, "locks eval: decode (%s, budget %d): %s\n", locks_selector_name(sel),
                    budget, tool_why(st));
            return -1;
        }
        int32_t next = argmax(R->logits, R->info.n_vocab);
        if (locks_tokenizer_is_eog(R->tok, next)) break;
        gen[n_gen++] = next;
        tokid = next;
    }
    R->measure = 0;
    double decode_ms = locks_now_ms() - t0;
    if (R->meter_err) {
        fprintf(stderr, "locks eval: metrics: %s\n", tool_why(R->meter_err));
        return -1;
    }
    char text[4096];
    size_t tlen = 0;
    if (locks_tokenizer_decode(R->tok, gen, n_gen, false, text, sizeof text, &tlen) != LOCKS_OK) {
        text[0] = 0;
        tlen = 0;
    }
    double score = locks_task_score(t, text);

    /* The record. */
    const char *sel_name = locks_selector_name(sel);
    int32_t rb = sel == LOCKS_SEL_FULL ? 0 : budget;
    fprintf(out, "{\"v\":1,\"task\":\"%s\",\"haystack\":\"%s\",\"context\":%d,\"sample\":%d,"
                 "\"seed\":%llu,\"depth\":%.4f,\"n_tokens\":%d,\"selector\":\"%s\",\"budget\":%d,"
                 "\"rank\":%d,\"summary\":\"%s\",\"sink\":%d,\"recent\":%d,\"score\":%.4f,",
            locks_task_name(t->kind), key_hay, context, sample, (unsigned long long)o->seed,
            (double)depth, n_prompt, sel_name, rb, o->rank,
            o->prec == LOCKS_SUMMARY_F32 ? "f32" : "q", o->sink, o->recent, score);
    fprintf(out, "\"answers\":[");
    for (int32_t a = 0; a < t->n_answers; a++) {
        fprintf(out, "%s\"", a ? "," : "");
        json_escape(out, t->answers[a]);
        fputc('"', out);
    }
    fprintf(out, "],\"output\":\"");
    json_escape(out, text);
    fprintf(out, "\",\"gen_tokens\":%d,\"steps_measured\":%lld,", n_gen,
            (long long)(R->n_meas / (R->info.n_layers > 0 ? R->info.n_layers : 1)));
    if (R->n_meas > 0)
        fprintf(out, "\"mass_cov\":%.5f,\"mass_cov_oracle\":%.5f,\"cosine\":%.5f,",
                R->mass_sum / (double)R->n_meas, R->mass_or_sum / (double)R->n_meas,
                R->cos_sum / (double)R->n_meas);
    else
        fprintf(out, "\"mass_cov\":null,\"mass_cov_oracle\":null,\"cosine\":null,");
    fprintf(out, "\"carrier_events\":%lld,\"carrier_hits\":%lld,\"decode_ms\":%.1f,"
                 "\"prefill_ms\":%.1f,\"seed_sample\":%llu,\"model\":\"",
            (long long)R->carrier.n_oracle, (long long)R->carrier.n_hit, decode_ms, prefill_ms,
            (unsigned long long)seed);
    json_escape(out, R->info.name);
    fprintf(out, "\",\"threads\":%d,\"machine\":\"", o->threads);
    json_escape(out, R->machine);
    fprintf(out, "\",\"commit\":\"");
    json_escape(out, R->commit);
    fprintf(out, "\"}\n");
    fflush(out);

    rec r;
    memset(&r, 0, sizeof r);
    r.task = t->kind;
    r.context = context;
    r.sample = sample;
    r.sel = sel;
    r.budget = rb;
    r.score = score;
    r.c_ev = R->carrier.n_oracle;
    r.c_hit = R->carrier.n_hit;
    if (R->n_meas > 0) {
        r.has_mass = 1;
        r.mass = R->mass_sum / (double)R->n_meas;
        r.mass_or = R->mass_or_sum / (double)R->n_meas;
    }
    make_key(r.key, sizeof r.key, o, locks_task_name(t->kind), key_hay, context, sample, sel_name, rb);
    recs_push(recs, &r);

    /* Progress. */
    char shown[64];
    size_t k = 0;
    for (size_t i = 0; i < tlen && k + 1 < sizeof shown; i++)
        shown[k++] = (text[i] == '\n' || text[i] == '\r') ? ' ' : text[i];
    shown[k] = 0;
    char bstr[16];
    if (rb) snprintf(bstr, sizeof bstr, "%d", rb);
    else snprintf(bstr, sizeof bstr, "dense");
    fprintf(stderr, "  %-6s %5s: %.2f  \"%s\"  (%d tok, %.1f s", sel_name, bstr, score, shown,
            n_gen, decode_ms / 1000.0);
    if (R->carrier.n_oracle) fprintf(stderr, ", carrier %.2f", locks_metrics_carrier_recall(&R->carrier));
    if (R->n_meas) fprintf(stderr, ", mass %.3f/%.3f", R->mass_sum / (double)R->n_meas,
                           R->mass_or_sum / (double)R->n_meas);
    fprintf(stderr, ")\n");
    return 0;
}

/* ================================================================================ */
/* Summary                                                                          */
/* ================================================================================ */

typedef struct {
    int n;
    double score;
    int64_t ev, hit;
    double mass, mass_or;
    int n_mass;
} agg;

static agg aggregate(const rec_list *l, int task, int sel, int32_t budget, const opts *o) {
    agg a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < l->n; i++) {
        const rec *r = &l->r[i];
        if (r->task != task || r->sel != sel || r->budget != budget) continue;
        int ctx_ok = 0;
        for (int c = 0; c < o->n_contexts; c++) ctx_ok |= r->context == o->contexts[c];
        if (!ctx_ok || r->sample >= o->samples) continue;
        a.n++;
        a.score += r->score;
        a.ev += r->c_ev;
        a.hit += r->c_hit;
        if (r->has_mass) {
            a.mass += r->mass;
            a.mass_or += r->mass_or;
            a.n_mass++;
        }
    }
    return a;
}

static void print_summary(const opts *o, const rec_list *l, const char *model_name) {
    if (o->json) {
        printf("{\"model\":\"");
        json_escape(stdout, model_name);
        printf("\",\"results\":[");
        int first = 1;
        for (int ti = 0; ti < o->n_tasks; ti++)
            for (int si = 0; si < o->n_sels; si++)
                for (int bi = 0; bi < o->n_budgets; bi++) {
                    int sel = o->sels[si];
                    int32_t b = sel == LOCKS_SEL_FULL ? 0 : o->budgets[bi];
                    if (sel == LOCKS_SEL_FULL && bi > 0) continue;
                    agg a = aggregate(l, o->tasks[ti], sel, b, o);
                    if (!a.n) continue;
                    printf("%s{\"task\":\"%s\",\"selector\":\"%s\",\"budget\":%d,\"n\":%d,"
                           "\"accuracy\":%.4f,\"carrier_events\":%lld,\"carrier_recall\":",
                           first ? "" : ",", locks_task_name(o->tasks[ti]),
                           locks_selector_name((locks_selector)sel), b, a.n, a.score / a.n,
                           (long long)a.ev);
                    if (a.ev) printf("%.4f", (double)a.hit / (double)a.ev);
                    else printf("null");
                    if (a.n_mass)
                        printf(",\"mass_coverage\":%.4f,\"mass_coverage_oracle\":%.4f}",
                               a.mass / a.n_mass, a.mass_or / a.n_mass);
                    else printf(",\"mass_coverage\":null,\"mass_coverage_oracle\":null}");
                    first = 0;
                }
        printf("]}\n");
        return;
    }
    for (int ti = 0; ti < o->n_tasks; ti++) {
        printf("\n%s: accuracy %% (samples) / carrier recall %%\n%-8s", locks_task_name(o->tasks[ti]),
               "budget");
        for (int si = 0; si < o->n_sels; si++)
            printf(" %16s", locks_selector_name(o->sels[si]));
        printf("\n");
        for (int bi = 0; bi < o->n_budgets; bi++) {
            printf("%-8d", o->budgets[bi]);
            for (int si = 0; si < o->n_sels; si++) {
                int sel = o->sels[si];
                agg a = aggregate(l, o->tasks[ti], sel, sel == LOCKS_SEL_FULL ? 0 : o->budgets[bi], o);
                char cell[48];
                if (!a.n) snprintf(cell, sizeof cell, "-");
                else if (a.ev)
                    snprintf(cell, sizeof cell, "%.0f (%d) / %.0f", 100 * a.score / a.n, a.n,
                             100.0 * (double)a.hit / (double)a.ev);
                else snprintf(cell, sizeof cell, "%.0f (%d)", 100 * a.score / a.n, a.n);
                printf(" %16s", cell);
            }
            printf("\n");
        }
    }
}

/* ================================================================================ */
/* Main                                                                             */
/* ================================================================================ */

/* How many (selector, budget) records of this sample the output file still lacks. */
static int sample_todo(const opts *o, const rec_list *recs, locks_task_kind kind, const char *hay, int32_t context,
                       int32_t s) {
    int todo = 0;
    for (int si = 0; si < o->n_sels; si++) {
        int nb = o->sels[si] == LOCKS_SEL_FULL ? 1 : o->n_budgets;
        for (int bi = 0; bi < nb; bi++) {
            char key[256];
            make_key(key, sizeof key, o, locks_task_name(kind), hay, context, s, locks_selector_name(o->sels[si]),
                     o->sels[si] == LOCKS_SEL_FULL ? 0 : o->budgets[bi]);
            todo += !recs_has(recs, key);
        }
    }
    return todo;
}

/* R->needle_pages: the pages holding a carrier needle's tokens (positions shifted by the
 * BOS), each once, at most 256; on_step's carrier recall counts them. */
static void note_needle_pages(run *R, const locks_task *t, int32_t bos) {
    R->n_needle_pages = 0;
    for (int32_t i = 0; i < t->n_needles; i++) {
        if (!t->needles[i].carrier) continue;
        int32_t p0 = (t->needles[i].tok_begin + bos) / LOCKS_PAGE;
        int32_t p1 = (t->needles[i].tok_end + bos - 1) / LOCKS_PAGE;
        for (int32_t p = p0; p <= p1 && R->n_needle_pages < 256; p++) {
            int dup = 0;
            for (int32_t k = 0; k < R->n_needle_pages; k++) dup |= R->needle_pages[k] == p;
            if (!dup) R->needle_pages[R->n_needle_pages++] = p;
        }
    }
}

/* The needles' token spans must decode to their text (else carrier recall would count
 * the wrong pages). Returns 0, or 1 with the reason printed. */
static int check_needle_spans(const run *R, const locks_task *t, const int32_t *prompt, int32_t bos) {
    for (int32_t i = 0; i < t->n_needles; i++) {
        char piece[256];
        size_t plen = 0;
        const locks_task_needle *nd = &t->needles[i];
        size_t want = nd->byte_end - nd->byte_begin;
        locks_status st = locks_tokenizer_decode(R->tok, prompt + bos + nd->tok_begin, nd->tok_end - nd->tok_begin,
                                                 true, piece, sizeof piece, &plen);
        CHECKM(!st && plen == want && !memcmp(piece, t->prompt + nd->byte_begin, want),
               "%s: needle %d tokens [%d, %d) do not decode to its text", locks_task_name(t->kind), i, nd->tok_begin,
               nd->tok_end);
    }
    return 0;
fail:
    return 1;
}

int eval_tasks_main(int argc, char **argv) {
    opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc;

    run R;
    memset(&R, 0, sizeof R);
    R.o = &o;
    rec_list recs = {0};
    char *prose = NULL;
    size_t prose_len = 0;
    FILE *out = NULL;
    int32_t *prompt = NULL;
    locks_status st;
    rc = 1;

    read_machine(R.machine, sizeof R.machine);
    R.commit = getenv("LOCKS_EVAL_COMMIT") ? getenv("LOCKS_EVAL_COMMIT") : "unknown";

    int need_shadow = 0;
    for (int i = 0; i < o.n_sels; i++) need_shadow |= o.sels[i] == LOCKS_SEL_SHADOW;
    int need_prose = 0;
    for (int i = 0; i < o.n_tasks; i++)
        need_prose |= o.tasks[i] != LOCKS_TASK_FWE &&
                      locks_task_haystack(o.tasks[i], o.haystack) == LOCKS_HAYSTACK_PROSE;
    if (need_prose) {
        prose = read_file(o.prose_path, &prose_len);
        CHECKM(prose && prose_len > 1000,
               "no prose haystack at %s (run scripts/fetch-haystack.sh, or --prose FILE, or "
               "--haystack noise)",
               o.prose_path);
    }

    R.model = locks_model_load(o.model_path, &st);
    CHECKM(R.model, "cannot load model %s: %s (run scripts/fetch-model.sh)", o.model_path,
           tool_why(st));
    R.info = locks_model_get_info(R.model);
    R.tok = locks_model_tokenizer(R.model);
    CHECKM(R.tok, "the model has no tokenizer");
    R.logits = malloc((size_t)R.info.n_vocab * sizeof *R.logits);
    CHECKM(R.logits, "out of memory");

    int32_t max_ctx = 0;
    for (int i = 0; i < o.n_contexts; i++) max_ctx = o.contexts[i] > max_ctx ? o.contexts[i] : max_ctx;
    locks_ctx_params cp = locks_ctx_default_params();
    cp.n_ctx = max_ctx + 512 + 2 * LOCKS_PAGE;
    cp.swa_rollback = 512 + 2; /* back to the prefill after an answer (at most 512 tokens) */
    cp.n_threads = o.threads;
    cp.rank = o.rank;
    cp.summary_prec = o.prec;
    cp.selectors = LOCKS_SEL_ALL; /* every selector is replayed on the same cache */
    cp.progress = on_prefill;
    cp.on_step = on_step;
    cp.on_step_user = &R;
    R.ctx = locks_ctx_init(R.model, cp, &st);
    CHECKM(R.ctx, "cannot create a context of %d tokens: %s", cp.n_ctx, tool_why(st));
    prompt = malloc((size_t)cp.n_ctx * sizeof *prompt);
    R.or_n = malloc((size_t)R.info.n_kv_heads * sizeof *R.or_n);
    CHECKM(prompt && R.or_n, "out of memory");

    int n_loaded = load_records(&o, &recs);
    out = fopen(o.out_path, "a");
    CHECKM(out, "cannot open %s: %s", o.out_path, strerror(errno));
    fprintf(stderr, "locks eval: %s (%s), %d tasks x %d contexts x %d samples, %d selectors x %d "
                    "budgets, %d threads; %d records already in %s\n",
            R.info.name, o.model_path, o.n_tasks, o.n_contexts, o.samples, o.n_sels, o.n_budgets,
            o.threads, n_loaded, o.out_path);

    const char *pre = o.chat ? "<|im_start|>system\n" LOCKS_SMOLLM2_SYSTEM_PROMPT
                               "<|im_end|>\n<|im_start|>user\n"
                             : "";
    const char *post = o.chat ? "<|im_end|>\n<|im_start|>assistant\n" : "\n";
    int32_t bos = R.info.add_bos && R.info.bos_id >= 0 ? 1 : 0;
    double t_start = locks_now_ms();

    /* Sample-major order: an interrupted sweep has about as many samples everywhere. */
    for (int32_t s = 0; s < o.samples; s++) {
        for (int ci = 0; ci < o.n_contexts; ci++) {
            for (int ti = 0; ti < o.n_tasks; ti++) {
                locks_task_kind kind = o.tasks[ti];
                int32_t context = o.contexts[ci];
                const char *hay = locks_haystack_name(kind == LOCKS_TASK_FWE
                                                          ? LOCKS_HAYSTACK_NOISE
                                                          : locks_task_haystack(kind, o.haystack));
                if (kind == LOCKS_TASK_FWE) hay = "none";
                if (!sample_todo(&o, &recs, kind, hay, context, s)) continue;

                locks_task_params tp = locks_task_default_params();
                tp.kind = kind;
                tp.n_tokens = context - bos;
                tp.depth = sample_depth(s);
                tp.seed = sample_seed(o.seed, kind, context, s);
                tp.haystack = o.haystack;
                tp.prose = prose;
                tp.prose_len = prose_len;
                tp.prompt_pre = pre;
                tp.prompt_post = post;
                tp.count = count_cb;
                tp.count_user = &R;
                locks_task t;
                st = locks_task_generate(&tp, &t);
                CHECKM(!st, "generating %s (%d tokens): %s", locks_task_name(kind), context,
                       tool_why(st));
                /* Tokenize the prompt; needle token positions shift by the BOS. */
                int32_t n = count_cb(t.prompt, t.prompt_len, &R);
                CHECKM(n > 1 && n + bos <= cp.n_ctx - 512, "prompt of %d tokens", n);
                if (bos) prompt[0] = R.info.bos_id;
                memcpy(prompt + bos, R.ids, (size_t)n * sizeof *prompt);
                int32_t n_prompt = n + bos;
                note_needle_pages(&R, &t, bos);
                if (check_needle_spans(&R, &t, prompt, bos)) goto fail;
                int32_t max_gen = o.max_gen > 0 ? o.max_gen : t.max_gen;
                fprintf(stderr, "[%s %s ctx %d sample %d/%d depth %.2f: %d tokens, answer %s%s] "
                                "%.0f s elapsed\n",
                        locks_task_name(kind), hay, context, s + 1, o.samples,
                        (double)t.needles[0].depth, n_prompt, t.answers[0],
                        t.n_answers > 1 ? ",..." : "", (locks_now_ms() - t_start) / 1000.0);

                /* Dense prefill of all but the last prompt token. */
                st = locks_ctx_reset(R.ctx);
                CHECKM(!st, "reset: %s", tool_why(st));
                double t0 = locks_now_ms();
                st = locks_ctx_prefill(R.ctx, prompt, n_prompt - 1, NULL);
                double prefill_ms = locks_now_ms() - t0;
                CHECKM(!st, "prefill: %s", tool_why(st));
                fprintf(stderr, "  prefill %d tokens: %.1f s\n", n_prompt - 1, prefill_ms / 1000.0);
                if (need_shadow) { /* shadow's shared basis: the prefill keys, as ShadowKV */
                    st = locks_cache_shadow_fit(locks_ctx_cache(R.ctx), locks_ctx_seq(R.ctx));
                    CHECKM(!st, "shadow fit: %s", tool_why(st));
                }

                for (int si = 0; si < o.n_sels; si++) {
                    int nb = o.sels[si] == LOCKS_SEL_FULL ? 1 : o.n_budgets;
                    for (int bi = 0; bi < nb; bi++) {
                        int32_t b = o.sels[si] == LOCKS_SEL_FULL ? 0 : o.budgets[bi];
                        char key[256];
                        make_key(key, sizeof key, &o, locks_task_name(kind), hay, context, s,
                                 locks_selector_name(o.sels[si]), b);
                        if (recs_has(&recs, key)) continue;
                        if (answer_one(&R, &t, prompt, n_prompt, o.sels[si], b, max_gen, out, hay,
                                       context, s, tp.seed, t.n_needles ? t.needles[0].depth : -1.0f,
                                       prefill_ms, &recs)) {
                            locks_task_free(&t);
                            goto fail;
                        }
                    }
                }
                locks_task_free(&t);
            }
        }
    }
    fprintf(stderr, "locks eval: done in %.1f min\n", (locks_now_ms() - t_start) / 60000.0);
    print_summary(&o, &recs, R.info.name);
    rc = 0;
fail:
    if (out) fclose(out);
    free(prompt);
    free(R.or_pages);
    free(R.or_n);
    free(R.ids);
    free(R.logits);
    free(recs.r);
    free(prose);
    if (R.ctx) locks_ctx_free(R.ctx);
    if (R.model) locks_model_free(R.model);
    return rc;
}
