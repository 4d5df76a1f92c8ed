/*
 * cmd_run.c — `locks run`: generate text with a GGUF model, decoding through the LOCKS
 * cache with any selector. Flags follow llama.cpp's (-m -p -f -c -n --temp --top-k
 * --top-p -s -t) plus the selector's. Generated text goes to stdout; progress, speeds
 * and the KV traffic per decode step go to stderr.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmds.h"
#include "eval/dump.h"
#include "locks_model.h"
#include "runutil.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: locks run [options]\n"
            "\n"
            "  -m FILE          GGUF model (default: the one scripts/fetch-model.sh fetches)\n"
            "  -p TEXT          prompt\n"
            "  -f FILE          read the prompt from FILE\n"
            "  -c N             context size in tokens (default: prompt + n, at least 512)\n"
            "  -n N             tokens to generate (default 128)\n"
            "  --temp X         temperature; 0 = greedy (default 0.8)\n"
            "  --top-k N        top-k sampling, 0 = off (default 40)\n"
            "  --top-p X        top-p sampling, 1 = off (default 0.95)\n"
            "  -s SEED          sampler seed (default: from the clock)\n"
            "  -t N             threads (default 2)\n"
            "  --chat           wrap the prompt as one user turn: Gemma's template for a vocabulary\n"
            "                   with <start_of_turn>, else ChatML (SmolLM2's system prompt)\n"
            "  --selector NAME  full|oracle|locks|quest|shadow|rocket (default locks)\n"
            "  --budget N       tokens attended per KV head in decode (default 2048)\n"
            "  --sink N         leading pages always attended (default 1)\n"
            "  --recent N       trailing full pages always attended (default 1)\n"
            "  --mass P         mass target 0 < P < 1: per step, layer and KV group, pages by\n"
            "                   estimated mass until P is covered, at most --budget tokens\n"
            "  --speculate K    exact output at sparse speed: draft K tokens with --selector at\n"
            "                   --budget, verify them in one dense pass, keep what dense agrees\n"
            "                   with (rejection sampling when sampling); prints the acceptance\n"
            "                   rate\n"
            "  --compare        with --speculate: one prefill, then dense (full) and speculative\n"
            "                   decoding side by side; prints both speeds and whether the\n"
            "                   tokens are identical (exit 3 if not)\n"
            "  --pairs N        with --compare: N dense / speculative pairs from the one prefill,\n"
            "                   each printed, then their median ratio (default 1; a noisy\n"
            "                   machine needs several)\n"
            "  --rank R         summary rank 1..15 (default 8)\n"
            "  --f32-act        fp32 activations for quantized weights (slower; validation)\n"
            "  --dump-kv FILE   write the KV dump (keys, values, decode queries, the last 32 prompt\n"
            "                   queries as SnapKV's observation window) for `locks eval`; of a\n"
            "                   model with local sliding-window layers only the global layers\n"
            "  --eval-logits FILE  no generation: run the prompt token by token (decode path,\n"
            "                   --selector applies) and write fp32 logits [n_prompt][n_vocab]\n"
            "                   to FILE (for scripts/logits_reference.py --compare)\n"
            "  --backend NAME   cpu|cuda: cuda runs the model on the GPU (llama architecture): F16/BF16\n"
            "                   weights as stored, Q4_0/Q4_1/Q8_0/Q4_K/Q5_K/Q6_K kept quantized (other\n"
            "                   types dequantized to fp16 at load); selectors full and locks;\n"
            "                   sampling on the device (top-k capped at 1024) (default cpu)\n"
            "  --no-graph       cuda: launch the decode kernels one by one instead of one CUDA graph\n"
            "  -v               verbose library log\n"
            "  -h, --help       this text\n");
}

static int parse_int(const char *s, int32_t lo, int32_t hi, int32_t *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) return 0;
    *out = (int32_t)v;
    return 1;
}

static int parse_float(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || *end || end == s) return 0;
    *out = v;
    return 1;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf) buf[len] = '\0';
    return buf;
}

/* Queries of every decode step, for --dump-kv: [n_layers][max_steps][Hq][d], and of the
 * last n_obs prompt tokens (the dump's observation window, for SnapKV): [n_layers]
 * [n_obs][Hq][d]. */
#define DUMP_OBS_WINDOW 32
typedef struct {
    float *q, *q_obs;
    int32_t n_layers, max_steps, n_prompt, qsize, n_obs;
} query_rec;

static void record_query(int32_t layer, int32_t pos, const float *q, void *user) {
    query_rec *r = user;
    int32_t step = pos - r->n_prompt;
    if (step < 0 && step >= -r->n_obs) {
        memcpy(r->q_obs + ((size_t)layer * r->n_obs + (size_t)(r->n_obs + step)) * r->qsize, q,
               sizeof(float) * (size_t)r->qsize);
        return;
    }
    if (step < 0 || step >= r->max_steps) return;
    memcpy(r->q + ((size_t)layer * r->max_steps + step) * r->qsize, q, sizeof(float) * (size_t)r->qsize);
}

/* --eval-logits: every prompt position's logits through the decode path. */
static int eval_logits(locks_ctx *ctx, const int32_t *tokens, int32_t n, int32_t n_vocab, const char *path) {
    FILE *f = fopen(path, "wb");
    float *lg = malloc(sizeof(float) * (size_t)n_vocab);
    int rc = 1;
    if (!f || !lg) {
        fprintf(stderr, "locks run: cannot write %s\n", path);
        goto out;
    }
    for (int32_t i = 0; i < n; i++) {
        locks_status st = locks_ctx_decode(ctx, tokens[i], lg);
        if (st != LOCKS_OK) {
            fprintf(stderr, "locks run: decode at %d: %s\n", i, tool_why(st));
            goto out;
        }
        if (fwrite(lg, sizeof(float), (size_t)n_vocab, f) != (size_t)n_vocab) goto out;
    }
    rc = 0;
    fprintf(stderr, "logits of %d positions written to %s\n", n, path);
out:
    if (f && fclose(f) != 0) rc = 1;
    free(lg);
    return rc;
}

static int on_token(int32_t token, void *user) {
    ru_stream_token(user, token);
    return 0;
}

static double wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* --speculate K --compare: one prefill of all but the last prompt token, then dense
 * decoding (`full`) and speculative decoding from that same prefix, side by side in one
 * process: are the tokens identical, and the speeds (tokens after the first per second,
 * the first coming from the last prompt token's pass in both). --pairs N: N such pairs
 * from the one prefill (the context truncated back after each), then the median ratio. */
static int cmp_double(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static int spec_compare(locks_ctx *ctx, const int32_t *tokens, int32_t n_prompt, int32_t n_predict, int32_t pairs,
                        locks_sampler_params sp, const locks_spec_params *spp, int32_t n_vocab) {
    int rc = 1;
    int32_t *a = malloc(sizeof(int32_t) * (size_t)(n_predict + 1)), *b = malloc(sizeof(int32_t) * (size_t)(n_predict + 1));
    double *ratios = malloc(sizeof(double) * (size_t)pairs);
    locks_sampler *s1 = locks_sampler_init(sp, n_vocab, NULL), *s2 = locks_sampler_init(sp, n_vocab, NULL);
    int32_t na = 0, nb = 0, n_same = 0;
    locks_spec_stats ss;
    locks_status st;
    if (!a || !b || !ratios || !s1 || !s2) goto out;
    if ((st = locks_ctx_prefill(ctx, tokens, n_prompt - 1, NULL)) != LOCKS_OK) goto fail;
    locks_step_params dense = locks_ctx_get_params(ctx).step;
    dense.selector = LOCKS_SEL_FULL;
    for (int32_t pr = 0; pr < pairs; pr++) {
        if (pr > 0 && (st = locks_ctx_truncate(ctx, n_prompt - 1)) != LOCKS_OK) goto fail;
        if ((st = locks_ctx_set_step(ctx, dense)) != LOCKS_OK) goto fail;
        double t0 = wall_ms();
        if ((st = locks_generate(ctx, tokens + n_prompt - 1, 1, n_predict, s1, NULL, NULL, a, &na)) != LOCKS_OK)
            goto fail;
        double t1 = wall_ms();
        if ((st = locks_ctx_truncate(ctx, n_prompt - 1)) != LOCKS_OK) goto fail;
        double t2 = wall_ms();
        if ((st = locks_speculate(ctx, tokens + n_prompt - 1, 1, n_predict, s2, spp, NULL, NULL, b, &nb, &ss)) !=
            LOCKS_OK)
            goto fail;
        double t3 = wall_ms();
        int same = na == nb && !memcmp(a, b, sizeof(int32_t) * (size_t)na);
        int first = 0;
        while (first < na && first < nb && a[first] == b[first]) first++;
        /* both times include the last prompt token's pass (one token), identical work */
        double ta = (t1 - t0) / 1e3, tb = (t3 - t2) / 1e3;
        ratios[pr] = (nb / tb) / (na / ta);
        n_same += same;
        printf("compare: context %d + %d tokens; dense %d tokens in %.2f s (%.2f tok/s); speculate K %d (%s budget %d%s)"
               " %d tokens in %.2f s (%.2f tok/s): %.2fx; accepted %d of %d drafts (%.1f%%) in %d rounds;"
               " output %s; draft %.2f s, verify %.2f s\n",
               n_prompt, na, na, ta, na / ta, spp->k, locks_selector_name(spp->draft.selector), spp->draft.budget,
               spp->draft.mass > 0 ? ", mass target" : "", nb, tb, nb / tb, ratios[pr], ss.n_accepted,
               ss.n_drafted, ss.n_drafted ? 100.0 * ss.n_accepted / ss.n_drafted : 0.0, ss.n_rounds,
               same ? "identical" : "DIFFERENT", ss.draft_ms / 1e3, ss.verify_ms / 1e3);
        fflush(stdout);
        if (!same) fprintf(stderr, "locks run: pair %d: first difference at generated token %d\n", pr + 1, first);
    }
    if (pairs > 1) {
        qsort(ratios, (size_t)pairs, sizeof(double), cmp_double);
        const double med = pairs % 2 ? ratios[pairs / 2] : 0.5 * (ratios[pairs / 2 - 1] + ratios[pairs / 2]);
        printf("compare median: %.3fx of %d pairs (min %.3f, max %.3f); output identical in %d of %d\n", med, pairs,
               ratios[0], ratios[pairs - 1], n_same, pairs);
    }
    rc = n_same == pairs ? 0 : 3;
    goto out;
fail:
    fprintf(stderr, "locks run: --compare failed: %s\n", tool_why(st));
out:
    free(a);
    free(b);
    free(ratios);
    locks_sampler_free(s1);
    locks_sampler_free(s2);
    return rc;
}

/* What `locks run` was asked for (its command line). */
typedef struct {
    const char *model_path, *prompt, *prompt_file, *dump_path, *logits_path;
    int32_t n_ctx, n_predict, n_threads, chat, verbose, f32_act, rank;
    int32_t speculate, compare, pairs; /* draft length K (0 = plain decoding); --compare, --pairs */
    int32_t no_graph;
    locks_backend backend;
    locks_sampler_params sp;
    locks_step_params step;
} run_opts;

/* Reads the command line into *o. Returns -1 to go on, else the exit status (0 after
 * --help, 2 for a bad or missing option, the reason printed). */
static int parse_args(int argc, char **argv, run_opts *o) {
    *o = (run_opts){.n_predict = 128, .n_threads = 2, .rank = 8, .pairs = 1, .backend = LOCKS_BACKEND_CPU};
    int seeded = 0;
    o->sp = locks_sampler_default_params();
    o->step = locks_step_default_params();
    o->step.selector = LOCKS_SEL_LOCKS;
    locks_sampler_params *sp = &o->sp;
    locks_step_params *step = &o->step;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1, takes = 1;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--chat")) {
            o->chat = 1, takes = 0;
        } else if (!strcmp(a, "--f32-act")) {
            o->f32_act = 1, takes = 0;
        } else if (!strcmp(a, "--compare")) {
            o->compare = 1, takes = 0;
        } else if (!strcmp(a, "-v")) {
            o->verbose = 1, takes = 0;
        } else if (!strcmp(a, "--no-graph")) {
            o->no_graph = 1, takes = 0;
        } else if (!v) {
            fprintf(stderr, "locks run: %s needs a value\n", a);
            return 2;
        } else if (!strcmp(a, "-m")) {
            o->model_path = v;
        } else if (!strcmp(a, "-p")) {
            o->prompt = v;
        } else if (!strcmp(a, "-f")) {
            o->prompt_file = v;
        } else if (!strcmp(a, "--dump-kv")) {
            o->dump_path = v;
        } else if (!strcmp(a, "--eval-logits")) {
            o->logits_path = v;
        } else if (!strcmp(a, "-c")) {
            ok = parse_int(v, 16, 1 << 24, &o->n_ctx);
        } else if (!strcmp(a, "-n")) {
            ok = parse_int(v, 0, 1 << 24, &o->n_predict);
        } else if (!strcmp(a, "-t")) {
            ok = parse_int(v, 1, 256, &o->n_threads);
        } else if (!strcmp(a, "--temp")) {
            ok = parse_float(v, &sp->temp);
        } else if (!strcmp(a, "--top-k")) {
            ok = parse_int(v, 0, 1 << 30, &sp->top_k);
        } else if (!strcmp(a, "--top-p")) {
            ok = parse_float(v, &sp->top_p);
        } else if (!strcmp(a, "-s")) {
            char *end;
            sp->seed = strtoull(v, &end, 10);
            ok = *end == '\0';
            seeded = 1;
        } else if (!strcmp(a, "--selector")) {
            ok = locks_selector_parse(v, &step->selector) == LOCKS_OK;
        } else if (!strcmp(a, "--budget")) {
            ok = parse_int(v, 1, INT32_MAX, &step->budget);
        } else if (!strcmp(a, "--sink")) {
            ok = parse_int(v, 0, 1 << 20, &step->n_sink);
        } else if (!strcmp(a, "--recent")) {
            ok = parse_int(v, 0, 1 << 20, &step->n_recent);
        } else if (!strcmp(a, "--mass")) {
            ok = parse_float(v, &step->mass) && step->mass > 0.0f && step->mass < 1.0f;
            if (!ok) {
                fprintf(stderr, "locks run: --mass wants a fraction strictly between 0 and 1, not '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--speculate")) {
            ok = parse_int(v, 1, 1 << 24, &o->speculate);
            if (!ok) {
                fprintf(stderr, "locks run: --speculate wants a draft length K >= 1, not '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--pairs")) {
            ok = parse_int(v, 1, 1000, &o->pairs);
        } else if (!strcmp(a, "--rank")) {
            ok = parse_int(v, 1, LOCKS_MAX_RANK, &o->rank);
        } else if (!strcmp(a, "--backend")) {
            ok = !strcmp(v, "cpu") || !strcmp(v, "cuda");
            o->backend = !strcmp(v, "cuda") ? LOCKS_BACKEND_CUDA : LOCKS_BACKEND_CPU;
        } else {
            fprintf(stderr, "locks run: unknown option '%s' (--help lists them)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "locks run: bad value '%s' for %s\n", v, a);
            return 2;
        }
        i += takes;
    }
    if (!o->prompt && !o->prompt_file) {
        fprintf(stderr, "locks run: give a prompt with -p TEXT or -f FILE (--help lists the options)\n");
        return 2;
    }
    if (o->speculate && step->selector == LOCKS_SEL_FULL) {
        fprintf(stderr, "locks run: --speculate drafts with a sparse selector; --selector full needs no draft\n");
        return 2;
    }
    if (o->compare && !o->speculate) {
        fprintf(stderr, "locks run: --compare goes with --speculate K\n");
        return 2;
    }
    if (o->pairs > 1 && !o->compare) {
        fprintf(stderr, "locks run: --pairs goes with --compare\n");
        return 2;
    }
    if (o->speculate && (o->dump_path || o->logits_path)) {
        fprintf(stderr, "locks run: --speculate does not combine with --dump-kv or --eval-logits\n");
        return 2;
    }
    if (!seeded) sp->seed = (uint64_t)time(NULL);
    return -1;
}

/* The prompt wrapped as one user turn in the model's chat template (Gemma's when the
 * vocabulary has <start_of_turn>, else ChatML with SmolLM2's system prompt), malloc'd;
 * NULL if out of memory. */
static char *chat_prompt(const locks_model *m, const char *prompt) {
    size_t need = 0;
    char *text = NULL;
    if (locks_tokenizer_find(locks_model_tokenizer(m), "<start_of_turn>", 15) >= 0) {
        /* Gemma's template (it opens with <bos> itself) */
        locks_chat_msg msgs[1] = {{"user", prompt}};
        locks_gemma_chat_format(msgs, 1, true, NULL, 0, &need);
        text = malloc(need + 1);
        if (text && locks_gemma_chat_format(msgs, 1, true, text, need + 1, &need) == LOCKS_OK) return text;
    } else {
        locks_chat_msg msgs[2] = {{"system", LOCKS_SMOLLM2_SYSTEM_PROMPT}, {"user", prompt}};
        locks_chatml_format(msgs, 2, true, NULL, 0, &need);
        text = malloc(need + 1);
        if (text && locks_chatml_format(msgs, 2, true, text, need + 1, &need) == LOCKS_OK) return text;
    }
    free(text);
    return NULL;
}

/* --dump-kv: the prompt's K/V, the decode steps' queries and the last prompt queries
 * (rec) of the layers a selector acts in, to path (tools/dump.h's format). Returns 0, or
 * 1 with the reason printed. */
static int write_dump(locks_ctx *ctx, const locks_model_info *in, query_rec *rec, int32_t n_prompt,
                      const char *dump_path) {
    int32_t steps = locks_ctx_len(ctx) - n_prompt;
    if (steps < 1) {
        fprintf(stderr, "locks run: --dump-kv needs at least one decode step (-n >= 2)\n");
        return 1;
    }
    /* Only the layers a selector acts in: a local (sliding-window) layer attends its
     * window exactly whatever the selector, so replaying it over the whole context
     * would score attention the model never computes. dump layer i = model layer
     * layers[i]; the recorded queries are compacted to [n_dump][steps][Hq][d]. */
    int32_t *layers = malloc(sizeof(int32_t) * (size_t)in->n_layers), n_dump = 0;
    int32_t *cache_layers = malloc(sizeof(int32_t) * (size_t)in->n_layers); /* where they sit in the cache */
    if (!layers || !cache_layers) {
        free(layers);
        free(cache_layers);
        return 1;
    }
    for (int32_t l = 0; l < in->n_layers; l++)
        if (!(in->swa_window > 0 && (l + 1) % in->swa_period != 0)) {
            cache_layers[n_dump] = locks_ctx_cache_layer(ctx, l);
            layers[n_dump++] = l;
        }
    for (int32_t i = 0; i < n_dump; i++) {
        memmove(rec->q + (size_t)i * steps * rec->qsize, rec->q + (size_t)layers[i] * rec->max_steps * rec->qsize,
                sizeof(float) * (size_t)steps * rec->qsize);
        memmove(rec->q_obs + (size_t)i * rec->n_obs * rec->qsize, rec->q_obs + (size_t)layers[i] * rec->n_obs * rec->qsize,
                sizeof(float) * (size_t)rec->n_obs * rec->qsize);
    }
    locks_dump_shape sh = {0};
    sh.n_layers = n_dump;
    sh.n_q_heads = in->n_heads;
    sh.n_kv_heads = in->n_kv_heads;
    sh.head_dim = in->head_dim;
    sh.n_ctx = n_prompt;
    sh.n_steps = steps;
    sh.kv_dtype = LOCKS_DTYPE_F16;
    sh.scale = 1.0f / sqrtf((float)in->head_dim);
    sh.rope_theta = in->rope_theta;
    memcpy(sh.model, in->name, sizeof sh.model - 1); /* truncated, NUL-padded */
    sh.n_obs = rec->n_obs;
    locks_status st = locks_dump_write_cache_layers(dump_path, &sh, locks_ctx_cache(ctx), locks_ctx_seq(ctx), NULL,
                                                    rec->q, rec->q_obs, cache_layers);
    free(layers);
    free(cache_layers);
    if (st != LOCKS_OK) {
        fprintf(stderr, "locks run: writing %s failed: %s\n", dump_path, tool_why(st));
        return 1;
    }
    fprintf(stderr, "KV dump: %s (%d prompt tokens, %d decode steps, %d of %d layers%s)\n", dump_path, n_prompt,
            steps, sh.n_layers, in->n_layers, sh.n_layers < in->n_layers ? ": the global ones, local layers left out" : "");
    return 0;
}

int cmd_run(int argc, char **argv) {
    run_opts o;
    const int parsed = parse_args(argc, argv, &o);
    if (parsed >= 0) return parsed;
    const char *prompt = o.prompt, *const dump_path = o.dump_path;
    int32_t n_ctx = o.n_ctx, n_predict = o.n_predict;
    const int32_t chat = o.chat, verbose = o.verbose, speculate = o.speculate;
    const locks_step_params step = o.step;
    ru_log_to_stderr(verbose);

    int rc = 1;
    char *file_text = NULL, *chat_text = NULL;
    int32_t *tokens = NULL;
    locks_model *m = NULL;
    locks_ctx *ctx = NULL;
    locks_sampler *smp = NULL;
    query_rec rec = {0};
    ru_stream out = {0};

    if (o.prompt_file) {
        file_text = read_file(o.prompt_file);
        if (!file_text) {
            fprintf(stderr, "locks run: cannot read %s\n", o.prompt_file);
            goto done;
        }
        prompt = file_text;
    }
    m = ru_load_model(o.model_path);
    if (!m) goto done;
    locks_model_info in = locks_model_get_info(m);

    if (chat) {
        chat_text = chat_prompt(m, prompt);
        if (!chat_text) goto done;
        prompt = chat_text;
    }
    int32_t n_prompt = 0;
    /* a ChatML prompt opens with <|im_start|> itself; raw prompts get BOS if the model asks */
    tokens = ru_tokenize(m, prompt, !chat && in.add_bos, chat, &n_prompt);
    if (!tokens) goto done;
    if (n_prompt == 0) {
        fprintf(stderr, "locks run: the prompt is empty\n");
        goto done;
    }
    if (verbose) {
        fprintf(stderr, "prompt ids:");
        for (int32_t i = 0; i < n_prompt; i++) fprintf(stderr, " %d", tokens[i]);
        fprintf(stderr, "\n");
    }
    if (n_ctx == 0) n_ctx = n_prompt + n_predict < 512 ? 512 : n_prompt + n_predict;
    if (n_prompt >= n_ctx) {
        fprintf(stderr, "locks run: the prompt has %d tokens, the context %d\n", n_prompt, n_ctx);
        goto done;
    }
    if (n_prompt + n_predict > n_ctx) n_predict = n_ctx - n_prompt;
    if (in.n_ctx_train > 0 && n_ctx > in.n_ctx_train) /* as llama.cpp does: allowed, but say so */
        fprintf(stderr,
                "locks run: warning: the context (%d tokens) is longer than the model was trained on (%d); "
                "quality past %d tokens is not what the model was trained for\n",
                n_ctx, in.n_ctx_train, in.n_ctx_train);
    if (speculate >= n_ctx - n_prompt) {
        fprintf(stderr, "locks run: --speculate %d does not fit the context (%d tokens, %d of them prompt)\n",
                speculate, n_ctx, n_prompt);
        goto done;
    }

    locks_ctx_params cp = locks_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = o.n_threads;
    cp.rank = o.rank;
    cp.step = step;
    cp.f32_act = o.f32_act;
    cp.progress = ru_progress;
    cp.backend = o.backend;
    cp.cuda_graph = !o.no_graph;
    /* how far back a run truncates: speculation drops its drafts, --compare the dense answer */
    if (speculate + 1 > cp.swa_rollback) cp.swa_rollback = speculate + 1;
    if (o.compare && n_predict + 1 > cp.swa_rollback) cp.swa_rollback = n_predict + 1;
    if (dump_path) {
        rec.n_layers = in.n_layers;
        rec.max_steps = n_predict;
        rec.n_prompt = n_prompt;
        rec.qsize = in.n_heads * in.head_dim;
        rec.q = calloc((size_t)in.n_layers * (size_t)(n_predict > 0 ? n_predict : 1) * (size_t)rec.qsize, sizeof(float));
        rec.n_obs = n_prompt < DUMP_OBS_WINDOW ? n_prompt : DUMP_OBS_WINDOW;
        rec.q_obs = calloc((size_t)in.n_layers * (size_t)rec.n_obs * (size_t)rec.qsize, sizeof(float));
        if (!rec.q || !rec.q_obs) goto done;
        cp.on_query = record_query;
        cp.on_query_user = &rec;
    }
    locks_status st;
    ctx = locks_ctx_init(m, cp, &st);
    if (!ctx) {
        fprintf(stderr, "locks run: cannot create the context: %s\n", tool_why(st));
        goto done;
    }
    smp = locks_sampler_init(o.sp, in.n_vocab, &st);
    if (!smp) goto done;
    fprintf(stderr, "prompt: %d tokens; context %d; selector %s, budget %d, sink %d, recent %d, rank %d; %s\n",
            n_prompt, n_ctx, locks_selector_name(step.selector), step.budget, step.n_sink, step.n_recent, o.rank,
            o.backend == LOCKS_BACKEND_CUDA ? (o.no_graph ? "GPU, kernel by kernel" : "GPU, one CUDA graph per token")
                                          : "CPU");

    if (o.logits_path) {
        rc = eval_logits(ctx, tokens, n_prompt, in.n_vocab, o.logits_path);
        goto done;
    }
    if (o.compare) {
        locks_spec_params spp = {speculate, step};
        rc = spec_compare(ctx, tokens, n_prompt, n_predict, o.pairs, o.sp, &spp, in.n_vocab);
        goto done;
    }
    out.m = m;
    out.f = stdout;
    int32_t n_gen = 0;
    locks_spec_stats ss = {0};
    double t_gen = wall_ms();
    if (speculate) {
        locks_spec_params spp = {speculate, step};
        st = locks_speculate(ctx, tokens, n_prompt, n_predict, smp, &spp, on_token, &out, NULL, &n_gen, &ss);
    } else {
        st = locks_generate(ctx, tokens, n_prompt, n_predict, smp, on_token, &out, NULL, &n_gen);
    }
    t_gen = wall_ms() - t_gen;
    ru_stream_end(&out);
    fputc('\n', stdout);
    fflush(stdout);
    if (st != LOCKS_OK) {
        fprintf(stderr, "locks run: generation failed after %d tokens: %s\n", n_gen, tool_why(st));
        goto done;
    }
    locks_run_stats rs = locks_ctx_stats(ctx);
    if (speculate) {
        /* the context's counters see drafts as decode steps and verify passes as prefill */
        double gen_s = (t_gen - rs.prefill_ms + ss.verify_ms) / 1e3;
        fprintf(stderr, "prefill: %d tokens in %.2f s\n", n_prompt, (rs.prefill_ms - ss.verify_ms) / 1e3);
        /* tok/s as decode's: the tokens after the first (which the prompt's pass gives) */
        fprintf(stderr, "speculate: %d tokens after the first in %.2f s (%.1f tok/s); %d rounds of K <= %d;"
                        " accepted %d of %d drafts (%.1f%%); draft %.2f s, verify %.2f s\n",
                n_gen - 1, gen_s, gen_s > 0 ? (n_gen - 1) / gen_s : 0.0, ss.n_rounds, speculate, ss.n_accepted, ss.n_drafted,
                ss.n_drafted ? 100.0 * ss.n_accepted / ss.n_drafted : 0.0, ss.draft_ms / 1e3, ss.verify_ms / 1e3);
    } else {
        ru_report(stderr, &rs, in.n_layers);
    }

    if (dump_path && write_dump(ctx, &in, &rec, n_prompt, dump_path) != 0) goto done;
    rc = 0;
done:
    locks_sampler_free(smp);
    locks_ctx_free(ctx);
    locks_model_free(m);
    free(tokens);
    free(chat_text);
    free(file_text);
    free(rec.q);
    free(rec.q_obs);
    free(out.text);
    return rc;
}
