/*
 * cmd_fidelity.c — `locks eval --fidelity FILE...`: how much a sparse selector changes
 * the model's next-token distribution, teacher-forced over real documents.
 *
 * For each document (its first --max-tokens tokens, BOS first if the model wants one):
 *   1. one dense pass over the whole document (locks_ctx_prefill_all: batched matmuls,
 *      every token attending as a dense decode step does, bit for bit) gives the dense
 *      logits after every token; those of the evaluated positions are kept;
 *   2. evaluated positions t (every --stride-th, from the last one down): the context is
 *      truncated to its first t tokens (dense K/V), and for every configuration token t
 *      is decoded through that selector and budget (or mass target), its logits compared
 *      with the dense ones, and the context truncated back to t. Going down means each
 *      truncation only drops what later positions no longer need: one dense pass serves
 *      every position and configuration.
 * Per configuration: top-1 agreement (sparse argmax == dense argmax), mean KL(dense ||
 * sparse) in nats over the full vocabulary, the mean tokens attended per (step, layer, KV
 * head), and the K/V + metadata bytes per step (all layers). A fixed-budget configuration
 * counts only the positions whose context (t + 1 tokens) is longer than its budget (at the
 * others it is dense attention); a mass-target configuration counts every evaluated
 * position.
 *
 * --per-layer: the same, with the selector applied at one layer at a time and every other
 * layer dense (one row per layer and configuration; local sliding-window layers, which
 * attend their window exactly whatever the selector, get no row).
 *
 * --window N: only the positions among the document's last N tokens are evaluated; the
 * tokens before them are prefilled once (locks_ctx_prefill, no logits) and only the
 * window goes through the dense per-token pass, so a long document costs one prefill
 * plus N tokens instead of logits at every token. With --at L1,L2,..., one window ends
 * at each length L (ascending, rows "DOC@L"): the prefill goes forward once, each window
 * is evaluated when it is reached (going down inside it), and the prefill then continues
 * from there, so one long prefill serves every length. The JSON/CSV files are rewritten
 * after each window, so an interrupted run keeps the lengths done.
 *
 * Selector `full` may be listed: one row (budget 0), its logits equal the dense pass bit
 * for bit (top-1 100%, KL 0: a check), and its decode time is the dense baseline of the
 * ms-per-step columns (wall and process CPU time of each decode call, configurations
 * interleaved position by position, so the ratios are side by side in one run).
 *
 * Models with local layers (Gemma 3): the selector acts only in the global layers, and
 * on_step fires only there, so mean tokens is per (global layer, KV head); the bytes per
 * step count the local layers' windows too (whole-model traffic, docs/ENGINE.md).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmds.h"
#include "locks_model.h"
#include "runutil.h"

#define FID_MAX_CONFIGS 64
#define FID_MAX_DOCS 16
#define FID_MAX_AT 8

typedef struct {
    locks_step_params step;
    int layer; /* -1: every layer sparse; else only this one */
} fid_config;

typedef struct {
    int64_t n;         /* positions counted */
    int64_t agree;     /* top-1 agreements */
    double kl;         /* sum of KL(dense || sparse) */
    double tokens;     /* sum over counted steps of mean tokens attended per (layer, KV head) */
    double bytes;      /* sum over counted steps of K/V + metadata bytes (all layers) */
    double wall_ms;    /* sum of the decode calls' wall time */
    double cpu_ms;     /* sum of the decode calls' process CPU time (all threads) */
} fid_acc;

static double now_ms(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* on_step hook: tokens attended in this step, summed over layers and KV heads. */
typedef struct {
    int32_t len;   /* context length of the current step (tokens) */
    int32_t hkv;   /* KV heads */
    int32_t layer; /* -1: count every layer; else only this one */
    int64_t tok;   /* attended tokens, summed over the counted layers and KV heads */
} fid_hook;

static void on_step_count(int32_t layer, const float *q, int32_t n_q_heads, const locks_selection *sel,
                          void *user) {
    (void)q, (void)n_q_heads;
    fid_hook *h = user;
    if (h->layer >= 0 && layer != h->layer) return; /* per layer: only the sparse one counts */
    for (int32_t kh = 0; kh < h->hkv; kh++)
        for (int32_t i = 0; i < sel->n_pages[kh]; i++) {
            int32_t lp = sel->pages[(size_t)kh * sel->max_pages + i], nt = h->len - lp * LOCKS_PAGE;
            h->tok += nt < LOCKS_PAGE ? nt : LOCKS_PAGE;
        }
}

static void fid_usage(FILE *f) {
    fprintf(f,
            "usage: locks eval --fidelity FILE... [options]\n"
            "Teacher-forced over each FILE: top-1 agreement with dense attention and mean\n"
            "KL(dense || sparse) of the next-token distribution, per selector and budget.\n"
            "  -m FILE            model (default: the fetched SmolLM2-135M)\n"
            "  --selectors LIST   comma-separated (default locks,oracle,quest)\n"
            "  --budgets LIST     comma-separated token budgets (default 64,128,256,512)\n"
            "  --mass LIST        also mass targets, comma-separated fractions in (0, 1), each\n"
            "                     with every selector, capped by --mass-cap (default none)\n"
            "  --mass-cap N       the budget cap of the mass-target rows (default 4096)\n"
            "  --max-tokens N     tokens of each document used (default 2048)\n"
            "  --stride S         evaluate every S-th position (default 8)\n"
            "  --window N         evaluate only positions among the last N tokens; the tokens\n"
            "                     before them are prefilled once without logits (default: all)\n"
            "  --at LIST          with --window: one window ending at each length (tokens),\n"
            "                     one forward prefill for all (rows DOC@L)\n"
            "  --per-layer        one layer sparse at a time (the others dense)\n"
            "  --sink N / --recent N / --rank R   as locks run (defaults 1 / 1 / 8)\n"
            "  -t N               threads (default 2)\n"
            "  --json FILE        write the rows as JSON\n"
            "  --csv FILE         write the rows as CSV\n");
}

int fidelity_wanted(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--fidelity")) return 1;
    return 0;
}

static int parse_i32(const char *s, int32_t lo, int32_t hi, int32_t *out) {
    if (!s) return 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) return 0;
    *out = (int32_t)v;
    return 1;
}

/* Comma-separated list of ints or floats into out[]; returns the count, -1 on error. */
static int parse_list(const char *s, int floats, double *out, int cap) {
    int n = 0;
    if (!s || !*s) return -1;
    const char *p = s;
    while (*p) {
        char *end;
        double v = floats ? strtod(p, &end) : (double)strtol(p, &end, 10);
        if (end == p || n == cap) return -1;
        out[n++] = v;
        p = end;
        if (*p == ',') p++;
        else if (*p) return -1;
    }
    return n;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *nb = realloc(buf, 2 * cap + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb, cap *= 2;
    }
    fclose(f);
    if (buf) buf[n] = '\0', *len = n;
    return buf;
}

/* log-softmax of x[n] into out (double). */
static void log_softmax(const float *x, int32_t n, double *out) {
    double mx = -INFINITY;
    for (int32_t i = 0; i < n; i++) mx = (double)x[i] > mx ? (double)x[i] : mx;
    double s = 0.0;
    for (int32_t i = 0; i < n; i++) s += exp((double)x[i] - mx);
    const double lz = mx + log(s);
    for (int32_t i = 0; i < n; i++) out[i] = (double)x[i] - lz;
}

static int32_t argmax_f(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static void config_label(const fid_config *c, char *buf, size_t cap) {
    if (c->step.selector == LOCKS_SEL_FULL) {
        snprintf(buf, cap, "full");
        return;
    }
    if (c->step.mass > 0.0f)
        snprintf(buf, cap, "%s mass %.3g (cap %d)", locks_selector_name(c->step.selector), (double)c->step.mass,
                 (int)c->step.budget);
    else
        snprintf(buf, cap, "%s budget %d", locks_selector_name(c->step.selector), (int)c->step.budget);
}

/* Row r's name: "DOC" (one window at the end), "DOC@L" (--at), "all". */
static void row_name(char *buf, size_t cap, const char *const *docs, int n_docs, int n_at, const int32_t *row_len,
                     int r) {
    if (r == n_docs * n_at) snprintf(buf, cap, "all");
    else if (n_at == 1) snprintf(buf, cap, "%s", base_name(docs[r]));
    else snprintf(buf, cap, "%s@%d", base_name(docs[r / n_at]), (int)row_len[r]);
}

/* (Re)writes the JSON and CSV files with every row reached so far; 0 or -1. */
static int write_rows(const char *json_path, const char *csv_path, const char *const *docs, int n_docs, int n_at,
                      const int32_t *row_len, const fid_acc *acc, const fid_config *cfg, int n_cfg) {
    if (!json_path && !csv_path) return 0;
    FILE *jf = json_path ? fopen(json_path, "w") : NULL, *cf = csv_path ? fopen(csv_path, "w") : NULL;
    if ((json_path && !jf) || (csv_path && !cf)) {
        fprintf(stderr, "locks eval: cannot write %s\n", json_path && !jf ? json_path : csv_path);
        if (jf) fclose(jf);
        if (cf) fclose(cf);
        return -1;
    }
    if (jf) fprintf(jf, "[\n");
    if (cf)
        fprintf(cf, "document,length,selector,budget,mass,layer,positions,top1_agree,mean_kl,mean_tokens,"
                    "bytes_per_step,ms_per_step,cpu_ms_per_step\n");
    int first_row = 1;
    const int n_rows = n_docs * n_at + 1;
    for (int r = 0; r < n_rows; r++) {
        if (r < n_rows - 1 && row_len[r] == 0) continue;
        char doc[160];
        row_name(doc, sizeof doc, docs, n_docs, n_at, row_len, r);
        const int32_t len = r < n_rows - 1 ? row_len[r] : 0;
        for (int c = 0; c < n_cfg; c++) {
            const fid_acc *a = &acc[(size_t)r * n_cfg + c];
            if (a->n == 0) continue;
            const double nn = (double)a->n, agr = (double)a->agree / nn, kl = a->kl / nn;
            const double tok = a->tokens / nn, bytes = a->bytes / nn, ms = a->wall_ms / nn, cms = a->cpu_ms / nn;
            const char *sel = locks_selector_name(cfg[c].step.selector);
            const int32_t budget = cfg[c].step.selector == LOCKS_SEL_FULL ? 0 : cfg[c].step.budget;
            if (jf)
                fprintf(jf,
                        "%s  {\"document\": \"%s\", \"length\": %d, \"selector\": \"%s\", \"budget\": %d,"
                        " \"mass\": %.4g, \"layer\": %d, \"positions\": %lld, \"top1_agree\": %.6f,"
                        " \"mean_kl\": %.6g, \"mean_tokens\": %.2f, \"bytes_per_step\": %.0f,"
                        " \"ms_per_step\": %.3f, \"cpu_ms_per_step\": %.3f}",
                        first_row ? "" : ",\n", doc, (int)len, sel, budget, (double)cfg[c].step.mass,
                        cfg[c].layer, (long long)a->n, agr, kl, tok, bytes, ms, cms);
            if (cf)
                fprintf(cf, "%s,%d,%s,%d,%.4g,%d,%lld,%.6f,%.6g,%.2f,%.0f,%.3f,%.3f\n", doc, (int)len, sel,
                        budget, (double)cfg[c].step.mass, cfg[c].layer, (long long)a->n, agr, kl, tok,
                        bytes, ms, cms);
            first_row = 0;
        }
    }
    int bad = 0;
    if (jf) {
        fprintf(jf, "\n]\n");
        bad |= fclose(jf) != 0;
    }
    if (cf) bad |= fclose(cf) != 0;
    return bad ? -1 : 0;
}

/* Each base configuration as it is, or (per_layer) once per global layer with only that
 * layer sparse (`full` stays one row); into cfg[cap]. Returns the count. */
static int expand_configs(const fid_config *base, int n_base, int per_layer, const locks_model_info *in,
                          fid_config *cfg, int cap) {
    int n_cfg = 0;
    for (int b = 0; b < n_base; b++) {
        if (!per_layer || base[b].step.selector == LOCKS_SEL_FULL) {
            cfg[n_cfg++] = base[b];
            continue;
        }
        for (int32_t l = 0; l < in->n_layers && n_cfg < cap; l++) {
            if (in->swa_window > 0 && (l + 1) % in->swa_period != 0) continue; /* local: exact window */
            cfg[n_cfg] = base[b];
            cfg[n_cfg++].layer = l;
        }
    }
    return n_cfg;
}

/* The first evaluated position's context must exceed this: the smallest fixed budget
 * (below it a configuration is dense), or with mass targets the forced pages. */
static int32_t smallest_budget(const fid_config *cfg, int n_cfg, int n_masses, int32_t sink, int32_t recent) {
    int32_t min_budget = INT32_MAX;
    for (int c = 0; c < n_cfg; c++)
        if (cfg[c].step.selector != LOCKS_SEL_FULL && cfg[c].step.mass == 0.0f && cfg[c].step.budget < min_budget)
            min_budget = cfg[c].step.budget;
    if (min_budget == INT32_MAX) min_budget = 1; /* only full */
    if (n_masses > 0) { /* mass rows count every position past the forced pages */
        int32_t forced = (sink + recent + 1) * LOCKS_PAGE;
        if (forced < min_budget) min_budget = forced;
    }
    return min_budget;
}

/* What one configuration's decode at position t is measured by. */
typedef struct {
    locks_ctx *ctx;
    fid_hook *hook;
    const int32_t *tokens;
    const double *lp; /* dense log-probabilities at t */
    int32_t top_d;    /* dense top-1 at t */
    int32_t n_vocab, n_sel_layers, n_kv_heads;
    float *lg;        /* [n_vocab] scratch: the configuration's logits */
    double *lq;       /* [n_vocab] scratch: their log-probabilities */
} fid_probe;

/* Decodes token t under configuration fc from a context of t tokens (truncated back
 * after), adding agreement, KL(dense || sparse), tokens attended, bytes read and time to
 * each of rows[0..1]. Returns the status, the reason printed. */
static locks_status score_config(const fid_probe *p, const fid_config *fc, int32_t t, fid_acc *rows[2]) {
    locks_status st;
    if ((st = locks_ctx_set_step(p->ctx, fc->step)) != LOCKS_OK ||
        (st = locks_ctx_set_sparse_layer(p->ctx, fc->layer)) != LOCKS_OK) {
        char lab[96];
        config_label(fc, lab, sizeof lab);
        fprintf(stderr, "locks eval: cannot set %s: %s\n", lab, tool_why(st));
        return st;
    }
    p->hook->len = t + 1;
    p->hook->layer = fc->layer;
    p->hook->tok = 0;
    locks_run_stats s0 = locks_ctx_stats(p->ctx);
    const double w0 = now_ms(CLOCK_MONOTONIC), c0 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
    st = locks_ctx_decode(p->ctx, p->tokens[t], p->lg);
    const double w1 = now_ms(CLOCK_MONOTONIC), c1 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
    if (st != LOCKS_OK) {
        char lab[96];
        config_label(fc, lab, sizeof lab);
        fprintf(stderr, "locks eval: %s at position %d: %s\n", lab, t, tool_why(st));
        return st;
    }
    locks_run_stats s1 = locks_ctx_stats(p->ctx);
    if ((st = locks_ctx_truncate(p->ctx, t)) != LOCKS_OK) return st;
    const int32_t V = p->n_vocab;
    log_softmax(p->lg, V, p->lq);
    double kl = 0.0;
    for (int32_t i = 0; i < V; i++)
        if (p->lp[i] > -745.0) kl += exp(p->lp[i]) * (p->lp[i] - p->lq[i]);
    const int agree = argmax_f(p->lg, V) == p->top_d;
    const double tok = (double)p->hook->tok / ((fc->layer >= 0 ? 1.0 : (double)p->n_sel_layers) * p->n_kv_heads);
    const double bytes = (double)(s1.bytes_meta - s0.bytes_meta) + (double)(s1.bytes_kv - s0.bytes_kv);
    for (int r = 0; r < 2; r++) {
        rows[r]->n++;
        rows[r]->agree += agree;
        rows[r]->kl += kl;
        rows[r]->tokens += tok;
        rows[r]->bytes += bytes;
        rows[r]->wall_ms += w1 - w0;
        rows[r]->cpu_ms += c1 - c0;
    }
    return LOCKS_OK;
}

/* The table on stdout: per (document, window) row, then all together. */
static void print_report(const char *const *docs, int n_docs, int n_at, const int32_t *row_len, const fid_acc *acc,
                         const fid_config *cfg, int n_cfg, int n_rows) {
    for (int r = 0; r < n_rows; r++) {
        char doc[160];
        row_name(doc, sizeof doc, docs, n_docs, n_at, row_len, r);
        printf("%s\n%-34s %5s %9s %10s %11s %13s %10s %10s\n", doc, "configuration", "layer", "positions",
               "top-1 agr", "mean KL", "mean tokens", "ms/step", "CPU-ms");
        for (int c = 0; c < n_cfg; c++) {
            const fid_acc *a = &acc[(size_t)r * n_cfg + c];
            if (a->n == 0) continue;
            char lab[96], layer[16];
            config_label(&cfg[c], lab, sizeof lab);
            if (cfg[c].layer < 0) snprintf(layer, sizeof layer, "all");
            else snprintf(layer, sizeof layer, "%d", cfg[c].layer);
            printf("%-34s %5s %9lld %9.2f%% %11.5f %13.1f %10.1f %10.1f\n", lab, layer, (long long)a->n,
                   100.0 * (double)a->agree / (double)a->n, a->kl / (double)a->n, a->tokens / (double)a->n,
                   a->wall_ms / (double)a->n, a->cpu_ms / (double)a->n);
        }
    }
}

int fidelity_main(int argc, char **argv) {
    const char *model_path = NULL, *json_path = NULL, *csv_path = NULL;
    const char *docs[FID_MAX_DOCS];
    int n_docs = 0, per_layer = 0;
    int32_t max_tokens = 2048, stride = 8, n_threads = 2, rank = 8, sink = 1, recent = 1, mass_cap = 4096;
    int32_t window = 0; /* > 0: evaluate only the last window tokens */
    double at[FID_MAX_AT];
    int n_at = 0;
    double budgets[16], masses[16];
    locks_selector sels[LOCKS_SEL_COUNT] = {LOCKS_SEL_LOCKS, LOCKS_SEL_ORACLE, LOCKS_SEL_QUEST};
    int n_sels = 3, n_budgets = 4, n_masses = 0;
    budgets[0] = 64, budgets[1] = 128, budgets[2] = 256, budgets[3] = 512;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1, takes = 1;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fid_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--fidelity")) {
            takes = 0;
            while (i + 1 < argc && argv[i + 1][0] != '-') {
                if (n_docs == FID_MAX_DOCS) {
                    fprintf(stderr, "locks eval: at most %d documents\n", FID_MAX_DOCS);
                    return 2;
                }
                docs[n_docs++] = argv[++i];
            }
        } else if (!strcmp(a, "--per-layer")) {
            per_layer = 1, takes = 0;
        } else if (!v) {
            fprintf(stderr, "locks eval: %s needs a value\n", a);
            return 2;
        } else if (!strcmp(a, "-m")) {
            model_path = v;
        } else if (!strcmp(a, "--json")) {
            json_path = v;
        } else if (!strcmp(a, "--csv")) {
            csv_path = v;
        } else if (!strcmp(a, "--selectors")) {
            n_sels = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *tok = strtok(buf, ","); tok && ok; tok = strtok(NULL, ",")) {
                ok = n_sels < LOCKS_SEL_COUNT && locks_selector_parse(tok, &sels[n_sels]) == LOCKS_OK;
                n_sels++;
            }
        } else if (!strcmp(a, "--budgets")) {
            n_budgets = parse_list(v, 0, budgets, 16);
            ok = n_budgets > 0;
            for (int k = 0; ok && k < n_budgets; k++) ok = budgets[k] >= 1 && budgets[k] <= 1 << 24;
        } else if (!strcmp(a, "--mass")) {
            n_masses = parse_list(v, 1, masses, 16);
            ok = n_masses > 0;
            for (int k = 0; ok && k < n_masses; k++) ok = masses[k] > 0.0 && masses[k] < 1.0;
            if (!ok) {
                fprintf(stderr, "locks eval: --mass wants fractions strictly between 0 and 1, not '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--mass-cap")) {
            ok = parse_i32(v, 1, 1 << 24, &mass_cap);
        } else if (!strcmp(a, "--max-tokens")) {
            ok = parse_i32(v, 2, 1 << 20, &max_tokens);
        } else if (!strcmp(a, "--at")) {
            n_at = parse_list(v, 0, at, FID_MAX_AT);
            ok = n_at > 0;
            for (int k = 0; ok && k < n_at; k++) ok = at[k] >= 2 && at[k] <= 1 << 24 && (k == 0 || at[k] > at[k - 1]);
        } else if (!strcmp(a, "--window")) {
            ok = parse_i32(v, 1, 1 << 24, &window);
        } else if (!strcmp(a, "--stride")) {
            ok = parse_i32(v, 1, 1 << 20, &stride);
        } else if (!strcmp(a, "-t")) {
            ok = parse_i32(v, 1, 256, &n_threads);
        } else if (!strcmp(a, "--rank")) {
            ok = parse_i32(v, 1, LOCKS_MAX_RANK, &rank);
        } else if (!strcmp(a, "--sink")) {
            ok = parse_i32(v, 0, 1 << 20, &sink);
        } else if (!strcmp(a, "--recent")) {
            ok = parse_i32(v, 0, 1 << 20, &recent);
        } else {
            fprintf(stderr, "locks eval --fidelity: unknown option '%s'\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "locks eval: bad value '%s' for %s\n", v ? v : "", a);
            return 2;
        }
        i += takes;
    }
    if (n_at > 0 && window == 0) {
        fprintf(stderr, "locks eval: --at needs --window\n");
        return 2;
    }
    if (n_at == 0) at[0] = 1 << 30, n_at = 1; /* one window at the document's end */
    if (n_docs == 0) {
        fprintf(stderr, "locks eval: --fidelity needs at least one FILE\n");
        fid_usage(stderr);
        return 2;
    }
    ru_log_to_stderr(0);

    int rc = 1;
    locks_model *m = ru_load_model(model_path);
    if (!m) return 1;
    const locks_model_info in = locks_model_get_info(m);
    const int32_t V = in.n_vocab;
    /* layers the selector acts in (and on_step reports): the global ones */
    int32_t n_sel_layers = 0;
    for (int32_t l = 0; l < in.n_layers; l++)
        n_sel_layers += !(in.swa_window > 0 && (l + 1) % in.swa_period != 0);

    /* configurations: selectors x budgets, then selectors x mass targets; per layer on request */
    static fid_config cfg[FID_MAX_CONFIGS * 32];
    int n_cfg = 0, n_base = 0;
    fid_config base[FID_MAX_CONFIGS];
    for (int s = 0; s < n_sels; s++) {
        if (sels[s] == LOCKS_SEL_FULL) { /* one row: the dense baseline */
            if (n_base == FID_MAX_CONFIGS) break;
            base[n_base].step = locks_step_default_params();
            base[n_base].step.selector = LOCKS_SEL_FULL; /* budget: the default (ignored; shown as 0) */
            base[n_base].step.n_sink = sink, base[n_base].step.n_recent = recent;
            base[n_base++].layer = -1;
            continue;
        }
        for (int b = 0; b < n_budgets && n_base < FID_MAX_CONFIGS; b++) {
            base[n_base].step = locks_step_default_params();
            base[n_base].step.selector = sels[s];
            base[n_base].step.budget = (int32_t)budgets[b];
            base[n_base].step.n_sink = sink, base[n_base].step.n_recent = recent;
            base[n_base++].layer = -1;
        }
        for (int k = 0; k < n_masses && n_base < FID_MAX_CONFIGS; k++) {
            base[n_base].step = locks_step_default_params();
            base[n_base].step.selector = sels[s];
            base[n_base].step.budget = mass_cap;
            base[n_base].step.mass = (float)masses[k];
            base[n_base].step.n_sink = sink, base[n_base].step.n_recent = recent;
            base[n_base++].layer = -1;
        }
    }
    n_cfg = expand_configs(base, n_base, per_layer, &in, cfg, (int)(sizeof cfg / sizeof cfg[0]));
    const int32_t min_budget = smallest_budget(cfg, n_cfg, n_masses, sink, recent);

    const int n_rows = n_docs * n_at + 1; /* (document, window) rows, then all */
    fid_acc *acc = calloc((size_t)n_cfg * (size_t)n_rows, sizeof *acc);
    int32_t *row_len = calloc((size_t)n_rows, sizeof *row_len); /* the window's length; 0: not reached */
    float *chunk = malloc(sizeof(float) * (size_t)64 * V);
    float *lg = malloc(sizeof(float) * (size_t)V);
    double *lp = malloc(sizeof(double) * (size_t)V), *lq = malloc(sizeof(double) * (size_t)V);
    float *dense = NULL;
    int32_t *tokens = NULL;
    char *text = NULL;
    locks_ctx *ctx = NULL;
    fid_hook hook = {0, in.n_kv_heads, -1, 0};
    if (!acc || !row_len || !chunk || !lg || !lp || !lq) goto done;

    for (int di = 0; di < n_docs; di++) {
        size_t len = 0;
        text = slurp(docs[di], &len);
        if (!text) {
            fprintf(stderr, "locks eval: cannot read %s\n", docs[di]);
            goto done;
        }
        int32_t n = 0;
        tokens = ru_tokenize(m, text, in.add_bos, 0, &n);
        if (!tokens) goto done;
        if (n > max_tokens) n = max_tokens;
        int32_t max_at = 0;
        for (int k = 0; k < n_at; k++)
            if (at[k] <= n || k == 0) max_at = (int32_t)(at[k] < n ? at[k] : n);
        locks_ctx_params cp = locks_ctx_default_params();
        cp.n_ctx = max_at + 1;
        cp.swa_rollback = cp.n_ctx; /* back to any evaluated position */
        cp.n_threads = n_threads;
        cp.rank = rank;
        cp.n_batch = 64;
        cp.on_step = on_step_count;
        cp.on_step_user = &hook;
        cp.step.selector = LOCKS_SEL_FULL;
        cp.selectors = 0;
        for (int c = 0; c < n_cfg; c++) cp.selectors |= LOCKS_SEL_BIT(cfg[c].step.selector); /* their metadata */
        locks_status st;
        ctx = locks_ctx_init(m, cp, &st);
        if (!ctx) {
            fprintf(stderr, "locks eval: cannot create a context of %d tokens: %s\n", cp.n_ctx, tool_why(st));
            goto done;
        }
        for (int k = 0; k < n_at; k++) {
            if (at[k] > n && k > 0) break; /* the document is shorter */
            const int32_t L = (int32_t)(at[k] < n ? at[k] : n);
            /* evaluated positions t < L (context t + 1 tokens > the smallest budget), every stride-th */
            int32_t first = min_budget < L ? min_budget : L;
            if (window > 0 && L - window > first) { /* the first evaluated position of the window */
                first = L - window;
                first += (L - 1 - first) % stride; /* so that the last position (L - 1) is evaluated */
            }
            int32_t n_pos = first < L ? (L - 1 - first) / stride + 1 : 0;
            if (n_pos == 0) {
                fprintf(stderr, "locks eval: %s: length %d, no position past budget %d\n", docs[di], L, min_budget);
                goto done;
            }
            /* 1. dense logits of the evaluated positions (positions first + i * stride) */
            free(dense);
            dense = malloc(sizeof(float) * (size_t)n_pos * V);
            if (!dense) goto done;
            /* tokens before the window: prefilled without logits (--window); else every
             * token goes through the dense per-token pass, as before */
            int32_t t_dense = locks_ctx_len(ctx);
            const int32_t pf_end = window > 0 ? first : 0;
            fprintf(stderr, "%s@%d: %d positions, %d configurations: prefill %d -> %d, dense pass...\n",
                    base_name(docs[di]), L, n_pos, n_cfg, t_dense, pf_end > t_dense ? pf_end : t_dense);
            if (pf_end > t_dense) {
                if ((st = locks_ctx_prefill(ctx, tokens + t_dense, pf_end - t_dense, NULL)) != LOCKS_OK) {
                    fprintf(stderr, "locks eval: prefill failed: %s\n", tool_why(st));
                    goto done;
                }
                t_dense = pf_end;
            }
            for (int32_t t0 = t_dense; t0 < L; t0 += 64) {
                int32_t cn = L - t0 < 64 ? L - t0 : 64;
                if ((st = locks_ctx_prefill_all(ctx, tokens + t0, cn, chunk)) != LOCKS_OK) {
                    fprintf(stderr, "locks eval: dense pass failed: %s\n", tool_why(st));
                    goto done;
                }
                for (int32_t t = t0; t < t0 + cn; t++)
                    if (t >= first && (t - first) % stride == 0)
                        memcpy(dense + (size_t)((t - first) / stride) * V, chunk + (size_t)(t - t0) * V,
                               sizeof(float) * (size_t)V);
            }
            const int row = di * n_at + k;
            row_len[row] = L;
            /* 2. every configuration at every evaluated position, last position first */
            for (int32_t pi = n_pos - 1; pi >= 0; pi--) {
                const int32_t t = first + pi * stride;
                if ((st = locks_ctx_truncate(ctx, t)) != LOCKS_OK) goto done;
                const float *dl = dense + (size_t)pi * V;
                const int32_t top_d = argmax_f(dl, V);
                log_softmax(dl, V, lp);
                const fid_probe probe = {ctx, &hook, tokens, lp, top_d, V, n_sel_layers, in.n_kv_heads, lg, lq};
                for (int c = 0; c < n_cfg; c++) {
                    const fid_config *fc = &cfg[c];
                    if (fc->step.selector != LOCKS_SEL_FULL && fc->step.mass == 0.0f && fc->step.budget >= t + 1)
                        continue; /* dense there */
                    fid_acc *rows[2] = {&acc[(size_t)row * n_cfg + c], &acc[(size_t)(n_rows - 1) * n_cfg + c]};
                    if (score_config(&probe, fc, t, rows) != LOCKS_OK) goto done;
                }
                fprintf(stderr, "\r  position %d (%d left)   ", t, pi);
            }
            fprintf(stderr, "\n");
            if (write_rows(json_path, csv_path, docs, n_docs, n_at, row_len, acc, cfg, n_cfg) != 0) goto done;
        }
        fprintf(stderr, "\n");
        locks_ctx_free(ctx);
        ctx = NULL;
        free(dense);
        dense = NULL;
        free(tokens);
        tokens = NULL;
        free(text);
        text = NULL;
    }

    /* ---- report: per (document, window), then all together ---- */
    if (write_rows(json_path, csv_path, docs, n_docs, n_at, row_len, acc, cfg, n_cfg) != 0) goto done;
    print_report(docs, n_docs, n_at, row_len, acc, cfg, n_cfg, n_rows);
    rc = 0;
done:
    locks_ctx_free(ctx);
    locks_model_free(m);
    free(acc);
    free(row_len);
    free(chunk);
    free(lg);
    free(lp);
    free(lq);
    free(dense);
    free(tokens);
    free(text);
    return rc;
}
