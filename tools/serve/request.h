/* request.h — the body of an OpenAI completion request, JSON -> parameters.
 *
 * POST /v1/completions and /v1/chat/completions take a JSON object; this module checks
 * it field by field (types, ranges) and fills a serve_request, or fills a serve_error
 * with the HTTP status, OpenAI's error message and the offending field. No I/O and no
 * model: the server applies the chat template and tokenizes afterwards, and the fuzz
 * harness (tests/fuzz/fuzz_serve_request.c) drives it alone.
 *
 * Fields read (others are ignored, as OpenAI's clients send more than a server uses):
 *   model                  string (checked against the served name by the server)
 *   prompt                 completions: a string, an array of one string, or an array
 *                          of token ids
 *   messages               chat: array of {role: string, content: string | null |
 *                          array of {type: "text", text: string}}, at least one
 *   max_tokens             integer >= 1 (chat also max_completion_tokens)
 *   temperature            number in [0, 2]; 0 is greedy
 *   top_p                  number in (0, 1]
 *   top_k                  integer >= 0 (an extension, as llama-server's)
 *   seed                   integer
 *   stop                   string or array of at most SERVE_MAX_STOP non-empty strings
 *   stream                 boolean; stream_options.include_usage boolean
 *   n                      1 if present
 *   locks                  {selector: name, budget: int >= 1, mass: number in [0, 1),
 *                          speculate: int >= 0}: the decode step, defaulting to the
 *                          server's flags
 */
#ifndef LOCKS_SERVE_REQUEST_H
#define LOCKS_SERVE_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "locks_model.h"

#define SERVE_MAX_STOP 4
#define SERVE_MAX_STOP_LEN 256

typedef struct {
    int chat;                /* parsed as a chat request */
    char *model;             /* NULL when absent */
    char *prompt;            /* completions with a text prompt, else NULL */
    int32_t *prompt_tokens;  /* completions with token ids, else NULL */
    int32_t n_prompt_tokens;
    locks_chat_msg *msgs;    /* chat: n_msgs messages (role and content owned) */
    int32_t n_msgs;
    int32_t max_tokens;      /* -1 when absent */
    locks_sampler_params sampling; /* the defaults where absent; seed_set says if seed came */
    int seed_set;
    char *stop[SERVE_MAX_STOP];
    int32_t n_stop;
    int stream, include_usage;
    locks_step_params step;  /* the defaults where absent */
    int32_t speculate;       /* draft length, 0 = off */
} serve_request;

typedef struct {
    int http;          /* 400, 413, ... */
    char message[256];
    char param[48];    /* "" when none */
    const char *code;  /* OpenAI's code string or NULL */
} serve_error;

/* Parses body[0, len) (not NUL-terminated) for a chat (chat != 0) or completions
 * request, starting from the sampling and step defaults given. Returns 0 and fills *out
 * (release with serve_request_free), or -1 with *err filled and *out empty. */
int serve_request_parse(const char *body, size_t len, int chat, locks_sampler_params sampling,
                        locks_step_params step, serve_request *out, serve_error *err);
void serve_request_free(serve_request *r);

#endif
