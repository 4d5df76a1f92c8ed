/*
 * cmd_eval.c — `locks eval`: replays recorded (or synthetic) decode steps through every
 * selector over a token-budget sweep and scores each selection against the exact
 * attention (the metrics of docs/DESIGN.md §3, src/eval/metrics.h).
 *
 * Sources:
 *  --dump FILE    a KV dump (src/eval/dump.h): the prefill keys/values are written into a
 *                 CPU cache, the shared basis of `shadow` is fitted on them (end of
 *                 prefill), then each decode step appends its token in every layer and
 *                 each layer's query of that step is replayed.
 *  --synthetic    the synthetic workload (src/eval/synth.h): one generator per layer (seed +
 *                 layer), a fixed context, and --steps fresh queries per layer (no
 *                 token is appended between steps). Its needle pages give carrier recall.
 *
 * For every (step, layer, selector, budget) the library's decode step runs (score,
 * select, attend) and its selection and output are compared with the float64 reference
 * of that step: mass coverage M(S), M(S)/M(S_oracle) (the float64 oracle of the same
 * budget and forced pages), oracle recall, output error and cosine, and the bytes the
 * step read (selector metadata + K/V of the attended tokens; dense K/V for reference),
 * counted per layer-step for the one sequence over all its KV heads (as the decode
 * step counts them: every full page's metadata, including pages SnapKV evicted).
 * Results are the mean over steps, per layer and over all layers.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cmds.h"
#include "eval/dump.h"
#include "eval_tasks.h"
#include "locks.h"
#include "eval/metrics.h"
#include "eval/synth.h"
#include "util.h"

#define EVAL_MAX_BUDGETS 32
#define EVAL_MAX_SELS 8
/* The synthetic workload's observation window (the "last prefill queries" SnapKV
 * needs): queries of steps SYNTH_OBS_STEP + i, fresh draws never replayed as steps. */
#define SYNTH_OBS_STEP 1000000

static void eval_usage(FILE *f) {
    fprintf(f,
            "usage: locks eval (--dump FILE | --synthetic) [options]\n"
            "\n"
            "Replays decode steps through every selector over a token-budget sweep and\n"
            "reports mass coverage (absolute and / oracle), oracle recall, output error and\n"
            "bytes read per step, per layer and averaged.\n"
            "\n"
            "source:\n"
            "  --dump FILE           KV dump written by `locks run --dump-kv FILE`\n"
            "  --synthetic           synthetic workload (src/eval/synth.h) with:\n"
            "    --context N         tokens (default 4096)\n"
            "    --steps N           queries per layer (default 8)\n"
            "    --layers N          layers, one generator each (default 4)\n"
            "    --heads HQ:HKV      query and KV heads (default 9:3, SmolLM2-135M)\n"
            "    --head-dim D        (default 64)\n"
            "    --seed N            (default 1)\n"
            "    --write-dump FILE   only write the workload as a KV dump (context tokens of\n"
            "                        prefill + --steps decode tokens with their queries)\n"
            "options:\n"
            "  --budgets LIST        token budgets (default 64,128,256,512,1024,2048)\n"
            "  --selectors LIST      (default oracle,locks,quest,rocket,shadow,shadow-lm)\n"
            "  --snapkv F            add the row rocket+snapkv: RocketKV's SnapKV prefill\n"
            "                        eviction first, keeping F x budget tokens (F >= 1), from\n"
            "                        the dump's observation window (or --snap-window W\n"
            "                        extra synthetic queries, default 32)\n"
            "  --rank R              summary rank, also shadow's basis rank and rocket's\n"
            "                        channel count (default 8)\n"
            "  --summary q|f32       LOCKS summary precision (default q, the deployed one)\n"
            "  --sink N --recent N   forced leading / trailing full pages (default 1, 1)\n"
            "  --max-steps N         replay at most N decode steps of a dump\n"
            "  --threads N           CPU threads (default 2)\n"
            "  --per-layer           print the per-layer tables too\n"
            "  --csv FILE            write every row (per layer and layer=all) as CSV\n"
            "  --json                one JSON object per line and (selector, budget, layer)\n"
            "                        (layer \"all\": the mean over layers), instead of tables\n"
            "plot: scripts/plot-eval.sh FILE.csv OUT.png\n");
}

/* ---- options ---------------------------------------------------------------------- */

typedef struct {
    const char *dump;
    int synthetic;
    int32_t context, steps, layers, hq, hkv, d;
    uint64_t seed;
    int32_t budgets[EVAL_MAX_BUDGETS], n_budgets;
    locks_selector sels[EVAL_MAX_SELS];
    int32_t n_sels;
    int32_t rank;
    locks_summary_prec prec;
    int32_t n_sink, n_recent, max_steps, threads;
    int per_layer, json;
    const char *csv;
    const char *write_dump;
    float snapkv;        /* > 0: add rocket+snapkv keeping snapkv x budget tokens */
    int32_t snap_window; /* observation window of the synthetic workload */
    int snap[EVAL_MAX_SELS]; /* 1: this row is rocket with SnapKV eviction */
} eval_opts;

static const char *sel_name(const eval_opts *o, int si) {
    return o->snap[si] ? "rocket+snapkv" : locks_selector_name(o->sels[si]);
}

static int parse_int(const char *s, int32_t lo, int32_t hi, int32_t *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = (int32_t)v;
    return 1;
}

static int parse_budgets(const char *s, eval_opts *o) {
    o->n_budgets = args_parse_ints(s, o->budgets, EVAL_MAX_BUDGETS, 1, 1 << 30);
    return o->n_budgets > 0;
}

static int parse_sels(const char *s, eval_opts *o) {
    char buf[512];
    if (strlen(s) >= sizeof buf) return 0;
    strcpy(buf, s);
    o->n_sels = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (o->n_sels == EVAL_MAX_SELS || locks_selector_parse(tok, &o->sels[o->n_sels]) != LOCKS_OK) return 0;
        o->n_sels++;
    }
    return o->n_sels > 0;
}

/* 0 ok, 1 help printed, 2 usage error */
static int parse_opts(int argc, char **argv, eval_opts *o) {
    memset(o, 0, sizeof *o);
    o->context = 4096;
    o->steps = 8;
    o->layers = 4;
    o->hq = 9;
    o->hkv = 3;
    o->d = 64;
    o->seed = 1;
    parse_budgets("64,128,256,512,1024,2048", o);
    parse_sels("oracle,locks,quest,rocket,shadow,shadow-lm", o);
    o->rank = 8;
    o->prec = LOCKS_SUMMARY_Q;
    o->n_sink = 1;
    o->n_recent = 1;
    o->max_steps = 1 << 30;
    o->threads = 2;
    o->snap_window = 32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1, takes = 1;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            eval_usage(stdout);
            return 1;
        } else if (!strcmp(a, "--synthetic")) {
            o->synthetic = 1;
            takes = 0;
        } else if (!strcmp(a, "--per-layer")) {
            o->per_layer = 1;
            takes = 0;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
            takes = 0;
        } else if (!v) {
            ok = 0;
        } else if (!strcmp(a, "--dump")) {
            o->dump = v;
        } else if (!strcmp(a, "--csv")) {
            o->csv = v;
        } else if (!strcmp(a, "--snapkv")) {
            char *end;
            o->snapkv = strtof(v, &end);
            ok = *end == '\0' && o->snapkv >= 1.0f && o->snapkv <= 1e6f;
        } else if (!strcmp(a, "--snap-window")) {
            ok = parse_int(v, 0, 1 << 16, &o->snap_window);
        } else if (!strcmp(a, "--write-dump")) {
            o->write_dump = v;
        } else if (!strcmp(a, "--context")) {
            ok = parse_int(v, LOCKS_PAGE, 1 << 24, &o->context);
        } else if (!strcmp(a, "--steps")) {
            ok = parse_int(v, 1, 1 << 20, &o->steps);
        } else if (!strcmp(a, "--layers")) {
            ok = parse_int(v, 1, 4096, &o->layers);
        } else if (!strcmp(a, "--heads")) {
            ok = sscanf(v, "%d:%d", &o->hq, &o->hkv) == 2 && o->hkv > 0 && o->hq >= o->hkv && o->hq % o->hkv == 0;
        } else if (!strcmp(a, "--head-dim")) {
            ok = parse_int(v, 8, LOCKS_MAX_HEAD_DIM, &o->d);
        } else if (!strcmp(a, "--seed")) {
            int32_t s = 0;
            ok = parse_int(v, 0, INT32_MAX, &s);
            o->seed = (uint64_t)s;
        } else if (!strcmp(a, "--budgets")) {
            ok = parse_budgets(v, o);
        } else if (!strcmp(a, "--selectors")) {
            ok = parse_sels(v, o);
        } else if (!strcmp(a, "--rank")) {
            ok = parse_int(v, 1, LOCKS_MAX_RANK, &o->rank);
        } else if (!strcmp(a, "--summary")) {
            ok = !strcmp(v, "q") || !strcmp(v, "f32");
            o->prec = !strcmp(v, "f32") ? LOCKS_SUMMARY_F32 : LOCKS_SUMMARY_Q;
        } else if (!strcmp(a, "--sink")) {
            ok = parse_int(v, 0, 1 << 20, &o->n_sink);
        } else if (!strcmp(a, "--recent")) {
            ok = parse_int(v, 0, 1 << 20, &o->n_recent);
        } else if (!strcmp(a, "--max-steps")) {
            ok = parse_int(v, 1, 1 << 30, &o->max_steps);
        } else if (!strcmp(a, "--threads")) {
            ok = parse_int(v, 1, 256, &o->threads);
        } else {
            fprintf(stderr, "locks eval: unknown option '%s'\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "locks eval: bad or missing value for %s\n", a);
            return 2;
        }
        i += takes;
    }
    if (!!o->dump == !!o->synthetic) {
        fprintf(stderr, "locks eval: give exactly one of --dump FILE or --synthetic\n\n");
        eval_usage(stderr);
        return 2;
    }
    if (o->snapkv > 0.0f) {
        if (o->n_sels == EVAL_MAX_SELS) {
            fprintf(stderr, "locks eval: too many selectors\n");
            return 2;
        }
        o->sels[o->n_sels] = LOCKS_SEL_ROCKET;
        o->snap[o->n_sels++] = 1;
    }
    if (o->write_dump && !o->synthetic) {
        fprintf(stderr, "locks eval: --write-dump needs --synthetic\n");
        return 2;
    }
    return 0;
}

/* Writes the synthetic workload as a dump: one generator per layer (seed + layer) over
 * context + steps tokens; the first `context` are the prefill, token context + s is
 * decode step s, whose queries are the generator's query of step s. */
static int write_synthetic_dump(const eval_opts *o) {
    locks_dump_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.n_layers = o->layers;
    sh.n_q_heads = o->hq;
    sh.n_kv_heads = o->hkv;
    sh.head_dim = o->d;
    sh.n_ctx = o->context;
    sh.n_steps = o->steps;
    sh.n_obs = o->snap_window < o->context ? o->snap_window : o->context;
    sh.kv_dtype = LOCKS_DTYPE_F16;
    sh.scale = 1.0f / sqrtf((float)o->d);
    snprintf(sh.model, sizeof sh.model, "synthetic seed %llu", (unsigned long long)o->seed);
    const int32_t n_tok = o->context + o->steps;
    const size_t row = (size_t)o->hkv * (size_t)o->d, qn = (size_t)o->hq * (size_t)o->d;
    float *k = locks_alloc((size_t)n_tok * row, sizeof *k), *v = locks_alloc((size_t)n_tok * row, sizeof *v);
    float *q = locks_alloc((size_t)o->steps * qn, sizeof *q);
    float *q_obs = locks_alloc((size_t)(sh.n_obs > 0 ? sh.n_obs : 1) * qn, sizeof *q_obs);
    int32_t *pos = locks_alloc((size_t)n_tok, sizeof *pos);
    locks_status st = LOCKS_ERR_OOM;
    locks_dump_writer *w = NULL;
    if (!k || !v || !q || !q_obs || !pos) goto done;
    for (int32_t t = 0; t < n_tok; t++) pos[t] = t;
    w = locks_dump_writer_open(o->write_dump, &sh, &st);
    for (int32_t l = 0; w && l < o->layers; l++) {
        locks_synth_params sp = locks_synth_default_params(o->hkv, o->hq, o->d, n_tok, o->seed + 1000003u * (uint64_t)l);
        locks_synth *sy = locks_synth_init(sp, &st);
        if (!sy) break;
        st = locks_synth_kv(sy, 0, n_tok, k, v);
        for (int32_t s = 0; st == LOCKS_OK && s < o->steps; s++) st = locks_synth_query(sy, s, q + (size_t)s * qn);
        for (int32_t i = 0; st == LOCKS_OK && i < sh.n_obs; i++)
            st = locks_synth_query(sy, SYNTH_OBS_STEP + i, q_obs + (size_t)i * qn);
        locks_synth_free(sy);
        if (st == LOCKS_OK) st = locks_dump_write_layer_obs(w, l, pos, k, v, q, sh.n_obs > 0 ? q_obs : NULL);
        if (st != LOCKS_OK) break;
    }
    if (w) {
        locks_status cst = locks_dump_writer_close(w);
        if (st == LOCKS_OK) st = cst;
    }
done:
    locks_free(k);
    locks_free(v);
    locks_free(q);
    locks_free(q_obs);
    locks_free(pos);
    if (st != LOCKS_OK) {
        fprintf(stderr, "locks eval: writing %s: %s\n", o->write_dump, tool_why(st));
        return 1;
    }
    fprintf(stderr, "locks eval: wrote %s (%d layers, %d + %d tokens)\n", o->write_dump, (int)o->layers,
            (int)o->context, (int)o->steps);
    return 0;
}

/* ---- the replay --------------------------------------------------------------------- */

typedef struct {
    double cov, ocov, ratio, recall, err, cosine, meta, kv, dense, tokens;
    int64_t n;
    locks_carrier_count car;
} eval_acc;

typedef struct {
    eval_opts o;
    int32_t L, Hq, Hkv, d, n_ctx, n_steps;
    float scale;
    char model[96];
    locks_dump dump;
    locks_synth **synth; /* [L] */
    eval_acc *acc;       /* [n_sels][n_budgets][L] */
} eval_state;

static eval_acc *acc_at(eval_state *e, int si, int bi, int l) {
    return &e->acc[((size_t)si * (size_t)e->o.n_budgets + (size_t)bi) * (size_t)e->L + (size_t)l];
}

#define EVAL_TRY(call)                                                                       \
    do {                                                                                     \
        locks_status st_ = (call);                                                           \
        if (st_ != LOCKS_OK) {                                                               \
            fprintf(stderr, "locks eval: %s failed: %s\n", #call, tool_why(st_));    \
            goto fail;                                                                       \
        }                                                                                    \
    } while (0)

/* Writes token rows [t0, t0 + n) of every layer of a dump into the cache. */
static locks_status write_dump_tokens(eval_state *e, locks_cache *c, int32_t seq, int32_t t0, int32_t n) {
    const size_t row = (size_t)e->Hkv * (size_t)e->d;
    for (int32_t l = 0; l < e->L; l++) {
        locks_status st = locks_cache_write(c, seq, l, t0, n, locks_dump_k(&e->dump, l) + (size_t)t0 * row,
                                            locks_dump_v(&e->dump, l) + (size_t)t0 * row);
        if (st != LOCKS_OK) return st;
    }
    return LOCKS_OK;
}

static int run_replay(eval_state *e) {
    const eval_opts *o = &e->o; /* e->o.n_sels may drop the snapkv row below */
    int rc = 1;
    locks_cache *c = NULL;
    float *q = NULL, *out = NULL;
    locks_selection sel = {0};
    int32_t *opages = NULL, *on = NULL;
    locks_attn_ref ref;
    memset(&ref, 0, sizeof ref);
    const int32_t steps = e->n_steps < o->max_steps ? e->n_steps : o->max_steps;
    const int32_t max_tok = e->n_ctx + (o->dump ? steps : 0);
    const int32_t max_pages = (max_tok + LOCKS_PAGE - 1) / LOCKS_PAGE;

    locks_cache_params cp = locks_cache_default_params();
    cp.selectors = LOCKS_SEL_ALL; /* every selector is compared: keep all their metadata */
    cp.n_layers = e->L;
    cp.n_kv_heads = e->Hkv;
    cp.head_dim = e->d;
    cp.n_pages = max_pages + 1;
    cp.max_seqs = 1;
    cp.rank = o->rank;
    cp.summary_prec = o->prec;
    cp.n_threads = o->threads;
    locks_status st;
    c = locks_cache_init(cp, &st);
    if (!c) {
        fprintf(stderr, "locks eval: cache init: %s\n", tool_why(st));
        return 1;
    }
    int32_t seq;
    EVAL_TRY(locks_cache_seq_add(c, &seq));
    double t0 = locks_now_ms();
    if (o->dump) {
        EVAL_TRY(locks_cache_append(c, seq, e->n_ctx));
        EVAL_TRY(write_dump_tokens(e, c, seq, 0, e->n_ctx));
    } else {
        for (int32_t l = 0; l < e->L; l++) EVAL_TRY(locks_synth_fill(e->synth[l], c, seq, l, o->threads));
    }
    EVAL_TRY(locks_cache_shadow_fit(c, seq)); /* end of prefill: shadow's shared basis */
    if (o->snapkv > 0.0f) { /* end of prefill: SnapKV's votes from the observation window */
        const int32_t n_obs = o->dump ? e->dump.shape.n_obs : (o->snap_window < e->n_ctx ? o->snap_window : e->n_ctx);
        if (n_obs < 1) { /* drop the row rather than the whole sweep */
            fprintf(stderr, "locks eval: this dump has no observation window: no rocket+snapkv row\n");
            e->o.n_sels--;
            e->o.snap[e->o.n_sels] = 0;
            o = &e->o;
            goto snap_done;
        }
        float *q_obs = locks_alloc((size_t)n_obs * (size_t)e->Hq * (size_t)e->d, sizeof *q_obs);
        if (!q_obs) goto fail;
        for (int32_t l = 0; l < e->L; l++) {
            st = LOCKS_OK;
            if (o->dump)
                memcpy(q_obs, locks_dump_q_obs(&e->dump, l), (size_t)n_obs * (size_t)e->Hq * (size_t)e->d * sizeof *q_obs);
            for (int32_t i = 0; !o->dump && st == LOCKS_OK && i < n_obs; i++)
                st = locks_synth_query(e->synth[l], SYNTH_OBS_STEP + i, q_obs + (size_t)i * (size_t)e->Hq * (size_t)e->d);
            if (st == LOCKS_OK) st = locks_cache_snapkv_observe(c, seq, l, q_obs, n_obs, e->Hq, e->scale);
            if (st != LOCKS_OK) break;
        }
        locks_free(q_obs);
        EVAL_TRY(st);
    }
snap_done:
    if (!o->json) fprintf(stderr, "locks eval: prefill of %d tokens x %d layers in %.1f s\n", (int)e->n_ctx,
                          (int)e->L, (locks_now_ms() - t0) / 1000.0);

    q = locks_alloc((size_t)e->Hq * (size_t)e->d, sizeof *q);
    out = locks_alloc((size_t)e->Hq * (size_t)e->d, sizeof *out);
    sel.max_pages = max_pages;
    sel.pages = locks_alloc((size_t)e->Hkv * (size_t)max_pages, sizeof *sel.pages);
    sel.n_pages = locks_alloc((size_t)e->Hkv, sizeof *sel.n_pages);
    opages = locks_alloc((size_t)e->Hkv * (size_t)max_pages, sizeof *opages);
    on = locks_alloc((size_t)e->Hkv, sizeof *on);
    if (!q || !out || !sel.pages || !sel.n_pages || !opages || !on) {
        fprintf(stderr, "locks eval: out of memory\n");
        goto fail;
    }
    for (int32_t s = 0; s < steps; s++) {
        if (o->dump) {
            EVAL_TRY(locks_cache_append(c, seq, 1));
            EVAL_TRY(write_dump_tokens(e, c, seq, e->n_ctx + s, 1));
        }
        const int32_t len = locks_cache_seq_len(c, seq);
        for (int32_t l = 0; l < e->L; l++) {
            if (o->dump) memcpy(q, locks_dump_q(&e->dump, l, s), (size_t)e->Hq * (size_t)e->d * sizeof *q);
            else EVAL_TRY(locks_synth_query(e->synth[l], s, q));
            locks_kv_src src;
            EVAL_TRY(locks_kv_src_cache(c, seq, l, &src));
            EVAL_TRY(locks_attn_ref_compute(&src, q, e->Hq, e->scale, o->threads, &ref));
            for (int bi = 0; bi < o->n_budgets; bi++) {
                const int32_t B = o->budgets[bi];
                int have_oracle = 0;
                for (int si = 0; si < o->n_sels; si++) {
                    locks_step_params p = locks_step_default_params();
                    p.selector = o->sels[si];
                    p.budget = B;
                    p.n_sink = o->n_sink;
                    p.n_recent = o->n_recent;
                    p.scale = e->scale;
                    locks_step_stats stats;
                    if (o->snap[si]) EVAL_TRY(locks_cache_snapkv_keep(c, seq, l, (int32_t)(o->snapkv * (float)B)));
                    st = locks_decode_step(c, l, &seq, 1, q, e->Hq, &p, out, &sel, &stats);
                    if (o->snap[si]) EVAL_TRY(locks_cache_snapkv_keep(c, seq, l, 0));
                    if (st == LOCKS_ERR_BUDGET) continue; /* budget below the forced pages */
                    EVAL_TRY(st);
                    locks_sel_metrics m;
                    EVAL_TRY(locks_metrics_eval(&ref, sel.pages, sel.n_pages, sel.max_pages, B, o->n_sink,
                                                o->n_recent, out, &m));
                    eval_acc *a = acc_at(e, si, bi, l);
                    a->cov += m.mass_coverage;
                    a->ocov += m.oracle_mass_coverage;
                    a->ratio += m.coverage_ratio;
                    a->recall += m.oracle_recall;
                    a->err += m.output_rel_err;
                    a->cosine += m.cosine;
                    a->tokens += m.tokens;
                    /* a dense step (budget >= context) scores nothing: no metadata read */
                    a->meta += B >= len ? 0.0 : (double)stats.bytes_meta;
                    a->kv += (double)stats.bytes_kv;
                    a->dense += (double)stats.bytes_dense;
                    a->n++;
                    if (e->synth) {
                        int32_t n_needles = 0;
                        const int32_t *needles = locks_synth_needles(e->synth[l], &n_needles);
                        if (!have_oracle) {
                            EVAL_TRY(locks_metrics_oracle_select(&ref, B, o->n_sink, o->n_recent, opages, on,
                                                                 max_pages));
                            have_oracle = 1;
                        }
                        locks_metrics_carrier_add(&a->car, e->Hkv, opages, on, sel.pages, sel.n_pages, max_pages,
                                                  needles, n_needles);
                    }
                }
            }
            locks_attn_ref_free(&ref);
        }
        if (!o->json)
            fprintf(stderr, "locks eval: step %d/%d done (%.1f s)\n", (int)s + 1, (int)steps,
                    (locks_now_ms() - t0) / 1000.0);
    }
    rc = 0;
fail:
    locks_attn_ref_free(&ref);
    locks_free(q);
    locks_free(out);
    locks_free(sel.pages);
    locks_free(sel.n_pages);
    locks_free(opages);
    locks_free(on);
    locks_cache_free(c);
    return rc;
}

/* ---- reporting -------------------------------------------------------------------------- */

/* Mean over steps of one (selector, budget) at layer l, or over all layers (l < 0). */
static eval_acc acc_mean(eval_state *e, int si, int bi, int l) {
    eval_acc r;
    memset(&r, 0, sizeof r);
    int l0 = l < 0 ? 0 : l, l1 = l < 0 ? e->L : l + 1;
    for (int k = l0; k < l1; k++) {
        const eval_acc *a = acc_at(e, si, bi, k);
        r.cov += a->cov;
        r.ocov += a->ocov;
        r.ratio += a->ratio;
        r.recall += a->recall;
        r.err += a->err;
        r.cosine += a->cosine;
        r.meta += a->meta;
        r.kv += a->kv;
        r.dense += a->dense;
        r.tokens += a->tokens;
        r.n += a->n;
        r.car.n_oracle += a->car.n_oracle;
        r.car.n_hit += a->car.n_hit;
    }
    if (r.n > 0) {
        double n = (double)r.n;
        r.cov /= n, r.ocov /= n, r.ratio /= n, r.recall /= n, r.err /= n, r.cosine /= n;
        r.meta /= n, r.kv /= n, r.dense /= n, r.tokens /= n;
    }
    return r;
}

static void print_table(eval_state *e, int l) {
    if (l < 0) printf("\nAveraged over %d layers and the steps:\n", (int)e->L);
    else printf("\nLayer %d:\n", l);
    printf("%7s %-13s %9s %9s %8s %9s %8s %11s %11s %8s%s\n", "budget", "selector", "coverage", "cov/orcl",
           "recall", "out_err", "cosine", "meta B/st", "kv B/st", "/dense", e->synth ? "  carrier" : "");
    for (int bi = 0; bi < e->o.n_budgets; bi++) {
        for (int si = 0; si < e->o.n_sels; si++) {
            eval_acc r = acc_mean(e, si, bi, l);
            if (r.n == 0) {
                printf("%7d %-13s   (budget below the forced pages)\n", (int)e->o.budgets[bi],
                       sel_name(&e->o, si));
                continue;
            }
            printf("%7d %-13s %9.4f %9.4f %8.4f %9.4f %8.4f %11.0f %11.0f %8.4f", (int)e->o.budgets[bi],
                   sel_name(&e->o, si), r.cov, r.ratio, r.recall, r.err, r.cosine, r.meta, r.kv,
                   (r.meta + r.kv) / r.dense);
            if (e->synth) {
                double cr = locks_metrics_carrier_recall(&r.car);
                if (cr < 0) printf("  %7s", "-"); /* the oracle never picked a needle page */
                else printf("  %7.3f", cr);
            }
            printf("\n");
        }
    }
}

/* One JSON object per line and (selector, budget, layer), flat, as `locks bench --json`. */
static void json_row(eval_state *e, int si, int bi, int l) {
    const eval_opts *o = &e->o;
    eval_acc r = acc_mean(e, si, bi, l);
    if (r.n == 0) return;
    printf("{\"command\":\"eval\",\"source\":\"%s\",\"model\":\"%s\",", o->dump ? "dump" : "synthetic", e->model);
    if (o->dump) printf("\"dump\":\"%s\",", o->dump);
    else printf("\"seed\":%llu,", (unsigned long long)o->seed);
    printf("\"layers\":%d,\"hq\":%d,\"hkv\":%d,\"head_dim\":%d,\"context\":%d,\"steps\":%d,\"rank\":%d,"
           "\"summary\":\"%s\",\"n_sink\":%d,\"n_recent\":%d,\"selector\":\"%s\",\"budget\":%d,\"layer\":",
           (int)e->L, (int)e->Hq, (int)e->Hkv, (int)e->d, (int)e->n_ctx,
           (int)(e->n_steps < o->max_steps ? e->n_steps : o->max_steps), (int)o->rank,
           o->prec == LOCKS_SUMMARY_Q ? "q" : "f32", (int)o->n_sink, (int)o->n_recent,
           sel_name(o, si), (int)o->budgets[bi]);
    if (l < 0) printf("\"all\",");
    else printf("%d,", l);
    printf("\"mass_coverage\":%.8g,\"oracle_mass_coverage\":%.8g,\"coverage_ratio\":%.8g,\"oracle_recall\":%.8g,"
           "\"output_rel_err\":%.8g,\"cosine\":%.8g,\"tokens\":%.6g,\"bytes_meta\":%.0f,\"bytes_kv\":%.0f,"
           "\"bytes_dense\":%.0f,\"bytes_step\":%.0f,\"samples\":%lld,\"carrier_recall\":",
           r.cov, r.ocov, r.ratio, r.recall, r.err, r.cosine, r.tokens, r.meta, r.kv, r.dense, r.meta + r.kv,
           (long long)r.n);
    double cr = e->synth ? locks_metrics_carrier_recall(&r.car) : -1.0;
    if (cr < 0) printf("null}\n");
    else printf("%.8g}\n", cr);
}

static void print_json(eval_state *e) {
    for (int l = -1; l < e->L; l++)
        for (int bi = 0; bi < e->o.n_budgets; bi++)
            for (int si = 0; si < e->o.n_sels; si++) json_row(e, si, bi, l);
}

static int write_csv(eval_state *e, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "locks eval: cannot write %s\n", path);
        return 1;
    }
    fprintf(f, "selector,budget,layer,coverage,coverage_rel,oracle_coverage,recall,out_err,cosine,tokens,"
               "bytes_meta,bytes_kv,bytes_dense,samples,carrier_recall\n");
    for (int l = -1; l < e->L; l++)
        for (int bi = 0; bi < e->o.n_budgets; bi++)
            for (int si = 0; si < e->o.n_sels; si++) {
                eval_acc r = acc_mean(e, si, bi, l);
                if (r.n == 0) continue;
                fprintf(f, "%s,%d,", sel_name(&e->o, si), (int)e->o.budgets[bi]);
                if (l < 0) fprintf(f, "all,");
                else fprintf(f, "%d,", l);
                fprintf(f, "%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.1f,%.0f,%.0f,%.0f,%lld,%.6f\n", r.cov, r.ratio, r.ocov,
                        r.recall, r.err, r.cosine, r.tokens, r.meta, r.kv, r.dense, (long long)r.n,
                        e->synth ? locks_metrics_carrier_recall(&r.car) : -1.0);
            }
    int bad = fclose(f) != 0;
    if (bad) fprintf(stderr, "locks eval: error writing %s\n", path);
    return bad;
}

int cmd_eval(int argc, char **argv) {
    if (eval_tasks_wanted(argc, argv)) return eval_tasks_main(argc, argv); /* tools/eval_tasks.c */
    if (fidelity_wanted(argc, argv)) return fidelity_main(argc, argv);     /* tools/cmd_fidelity.c */
    eval_state e;
    memset(&e, 0, sizeof e);
    int pr = parse_opts(argc, argv, &e.o);
    if (pr) return pr == 1 ? 0 : 2;
    const eval_opts *o = &e.o;
    if (o->write_dump) return write_synthetic_dump(o);
    int rc = 1;
    if (o->dump) {
        locks_status st = locks_dump_load(o->dump, &e.dump);
        if (st != LOCKS_OK) {
            fprintf(stderr, "locks eval: cannot load %s: %s\n", o->dump, tool_why(st));
            return 1;
        }
        const locks_dump_shape *s = &e.dump.shape;
        e.L = s->n_layers, e.Hq = s->n_q_heads, e.Hkv = s->n_kv_heads, e.d = s->head_dim;
        e.n_ctx = s->n_ctx, e.n_steps = s->n_steps, e.scale = s->scale;
        snprintf(e.model, sizeof e.model, "%s", s->model);
    } else {
        e.L = o->layers, e.Hq = o->hq, e.Hkv = o->hkv, e.d = o->d;
        e.n_ctx = o->context, e.n_steps = o->steps, e.scale = 1.0f / sqrtf((float)o->d);
        snprintf(e.model, sizeof e.model, "synthetic");
        e.synth = locks_alloc((size_t)e.L, sizeof *e.synth);
        if (!e.synth) goto done;
        for (int32_t l = 0; l < e.L; l++) {
            locks_status st;
            locks_synth_params sp = locks_synth_default_params(e.Hkv, e.Hq, e.d, e.n_ctx, o->seed + 1000003u * (uint64_t)l);
            e.synth[l] = locks_synth_init(sp, &st);
            if (!e.synth[l]) {
                fprintf(stderr, "locks eval: synthetic workload: %s\n", tool_why(st));
                goto done;
            }
        }
    }
    if (o->rank >= e.d) {
        fprintf(stderr, "locks eval: --rank must be below the head dimension %d\n", (int)e.d);
        rc = 2;
        goto done;
    }
    e.acc = locks_alloc((size_t)o->n_sels * (size_t)o->n_budgets * (size_t)e.L, sizeof *e.acc);
    if (!e.acc) goto done;
    if (!o->json) {
        if (o->dump) printf("locks eval: dump %s (model %s)\n", o->dump, e.model);
        else printf("locks eval: synthetic workload, seed %llu\n", (unsigned long long)o->seed);
        printf("  %d layers, %d query / %d KV heads, d %d, context %d, %d steps; rank %d, summary %s, sink %d, "
               "recent %d\n",
               (int)e.L, (int)e.Hq, (int)e.Hkv, (int)e.d, (int)e.n_ctx,
               (int)(e.n_steps < o->max_steps ? e.n_steps : o->max_steps), (int)o->rank,
               o->prec == LOCKS_SUMMARY_Q ? "q" : "f32", (int)o->n_sink, (int)o->n_recent);
    }
    if (run_replay(&e)) goto done;
    if (o->json) {
        print_json(&e);
    } else {
        printf("\nbytes are per layer-step for the sequence (all KV heads): meta = selector metadata read, kv = K+V\n"
               "of the attended tokens, /dense = (meta + kv) / dense K+V bytes; cov/orcl = M(S) / M(S_oracle).\n");
        if (o->per_layer)
            for (int l = 0; l < e.L; l++) print_table(&e, l);
        print_table(&e, -1);
    }
    if (o->csv && write_csv(&e, o->csv)) goto done;
    rc = 0;
done:
    if (e.synth)
        for (int32_t l = 0; l < e.L; l++) locks_synth_free(e.synth[l]);
    locks_free(e.synth);
    locks_free(e.acc);
    locks_dump_free(&e.dump);
    return rc;
}
