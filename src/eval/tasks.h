/*
 * tasks.h — long-context task generators in the style of RULER and the passkey test.
 *
 * Each generator builds one prompt of a requested length *in tokens*, counted with a
 * caller-supplied callback (the model's own tokenizer in `locks eval`, a fake one in the
 * unit tests), plus the answers that a correct reply contains and where the pieces that
 * carry them ("needles") sit in the prompt, in bytes and in tokens. Everything is drawn
 * from a seed: the same parameters give the same prompt, byte for byte.
 *
 * Tasks (RULER names in brackets):
 *   passkey          "The pass key is 71432. Remember it. 71432 is the pass key." in noise.
 *   niah_single      one needle "One of the special magic numbers for <key> is: <7 digits>."
 *                    [niah_single_1/2]
 *   niah_multikey    the asked needle plus n_keys - 1 distractor needles with other keys
 *                    [niah_multikey_1]
 *   niah_multivalue  n_values needles with the same key; all values are expected
 *                    [niah_multivalue]
 *   niah_multiquery  n_queries needles with different keys; all of them are asked
 *                    [niah_multiquery]
 *   vt               variable tracking: "VAR ABCDE = 12345", then n_hops assignments
 *                    "VAR FGHIJ = VAR ABCDE", ...; every name in the chain is expected [vt]
 *   fwe              frequent-word extraction: a text of coded words with Zipf-like counts;
 *                    the three most frequent words are expected [fwe]
 *
 * Haystacks: LOCKS_HAYSTACK_NOISE repeats "The grass is green. The sky is blue. The sun is
 * yellow. Here we go. There and back again." (RULER's noise); LOCKS_HAYSTACK_PROSE cuts
 * consecutive sentences, from a seeded offset, out of a text the caller provides (see
 * scripts/fetch-haystack.sh). fwe has no haystack: its coded text is the whole context.
 *
 * Layout of a prompt: prompt_pre + instruction + context (haystack with the needles) +
 * question + prompt_post + answer_prefix. prompt_pre / prompt_post are the chat template
 * around the user turn (e.g. ChatML); count() must accept whatever they contain.
 *
 * Depth: the answer-bearing needle (the first one) is placed at the sentence boundary
 * whose share of the haystack tokens before it is closest to `depth`. Other needles
 * (distractors, further values or queries, later hops) go to seeded random boundaries;
 * the hops of vt keep their order and follow the first assignment.
 *
 * Length: the prompt has at most n_tokens tokens and, when the haystack text suffices,
 * at least n_tokens minus the longest haystack sentence. Token spans of the needles are
 * exact when count() tokenizes a prefix ending at a space-word boundary the same way as
 * the full text (true of GPT-2 style byte-level BPE, whose pre-tokenizer splits there).
 */
#ifndef LOCKS_TASKS_H
#define LOCKS_TASKS_H

#include <stddef.h>
#include <stdint.h>

#include "locks.h"

typedef enum {
    LOCKS_TASK_PASSKEY = 0,
    LOCKS_TASK_NIAH_SINGLE,
    LOCKS_TASK_NIAH_MULTIKEY,
    LOCKS_TASK_NIAH_MULTIVALUE,
    LOCKS_TASK_NIAH_MULTIQUERY,
    LOCKS_TASK_VT,
    LOCKS_TASK_FWE,
    LOCKS_TASK_COUNT
} locks_task_kind;

/* "passkey", "niah_single", ...; NULL for an out-of-range value. */
const char *locks_task_name(locks_task_kind k);
/* Parses a task name; LOCKS_ERR_INVALID_ARG for an unknown one. */
locks_status locks_task_parse(const char *name, locks_task_kind *out);

typedef enum {
    LOCKS_HAYSTACK_AUTO = 0, /* RULER's choice: noise for passkey and vt, prose for niah_* */
    LOCKS_HAYSTACK_NOISE,
    LOCKS_HAYSTACK_PROSE,
} locks_haystack_kind;

/* "auto", "noise", "prose"; NULL for an out-of-range value. */
const char *locks_haystack_name(locks_haystack_kind k);
locks_status locks_haystack_parse(const char *name, locks_haystack_kind *out);
/* The haystack a task actually uses for kind k (AUTO resolved; fwe: NOISE, unused). */
locks_haystack_kind locks_task_haystack(locks_task_kind task, locks_haystack_kind k);

/* Number of tokens text[0, len) encodes to (no BOS added); < 0 on failure. */
typedef int32_t (*locks_task_count_fn)(const char *text, size_t len, void *user);

typedef struct {
    locks_task_kind kind;
    int32_t n_tokens;            /* target prompt length in tokens, template included */
    float depth;                 /* 0..1: share of haystack tokens before the first needle */
    uint64_t seed;
    locks_haystack_kind haystack;
    const char *prose;           /* the text for LOCKS_HAYSTACK_PROSE (not copied) */
    size_t prose_len;
    int32_t n_keys;              /* niah_multikey: needles in all (>= 2, default 4) */
    int32_t n_values;            /* niah_multivalue: values of the key (default 4) */
    int32_t n_queries;           /* niah_multiquery: keys asked (default 4) */
    int32_t n_hops;              /* vt: assignments after the first one (default 4) */
    const char *prompt_pre;      /* text before the user turn (NULL: none) */
    const char *prompt_post;     /* text between the user turn and the answer prefix */
    locks_task_count_fn count;   /* required */
    void *count_user;
} locks_task_params;

/* Defaults: passkey, 1024 tokens, depth 0.5, seed 1, AUTO haystack, no template. */
locks_task_params locks_task_default_params(void);

#define LOCKS_TASK_MAX_ANSWERS 8
#define LOCKS_TASK_MAX_NEEDLES 16

typedef struct {
    size_t byte_begin, byte_end;  /* [begin, end) in prompt */
    int32_t tok_begin, tok_end;   /* [begin, end) token positions (prompt without BOS) */
    int32_t carrier;              /* 1: holds an expected answer; 0: distractor */
    float depth;                  /* haystack tokens before it / haystack tokens */
} locks_task_needle;

typedef struct {
    locks_task_kind kind;
    locks_haystack_kind haystack;           /* resolved */
    char *prompt;                           /* NUL-terminated, owned */
    size_t prompt_len;
    int32_t n_tokens;                       /* count(prompt) */
    int32_t haystack_tokens;                /* sum of the haystack sentences' counts */
    int32_t n_answers;
    char *answers[LOCKS_TASK_MAX_ANSWERS];  /* owned */
    int32_t max_gen;                        /* tokens worth generating for the answer */
    int32_t n_needles;                      /* answer-bearing first */
    locks_task_needle needles[LOCKS_TASK_MAX_NEEDLES];
} locks_task;

/* Builds one sample. On success *out owns its strings (free with locks_task_free).
 * LOCKS_ERR_INVALID_ARG: bad parameters (no count, depth outside [0, 1], prose missing
 * for a prose haystack, n_tokens too small for the fixed parts, too many needles);
 * LOCKS_ERR_FORMAT: count() failed; LOCKS_ERR_OOM. On failure *out is zeroed. */
locks_status locks_task_generate(const locks_task_params *p, locks_task *out);
void locks_task_free(locks_task *t);

/* RULER's string_match_all: the share of expected answers contained in output,
 * case-insensitively, in [0, 1]. */
double locks_task_score(const locks_task *t, const char *output);

#endif
