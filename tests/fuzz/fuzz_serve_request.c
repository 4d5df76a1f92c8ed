/*
 * fuzz_serve_request.c — libFuzzer harness for `locks serve`'s request parser
 * (tools/serve/request.c): any bytes as a chat and as a completions body. The harness
 * aborts (a finding) when a parse that succeeds breaks the contract of request.h (a
 * value out of its range, a missing prompt or message, too many stop strings) or a
 * failure is not a 400 with a message; ASan+UBSan catch the rest. Run:
 * scripts/fuzz-serve.sh SECONDS
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(x)                                                         \
    do {                                                                   \
        if (!(x)) {                                                        \
            fprintf(stderr, "fuzz_serve_request: broken: %s\n", #x);       \
            abort();                                                       \
        }                                                                  \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    locks_sampler_params sp = {0.8f, 40, 0.95f, 42};
    locks_step_params step = {LOCKS_SEL_LOCKS, 2048, 1, 1, 0.0f, 0.0f};
    for (int chat = 0; chat < 2; chat++) {
        serve_request r;
        serve_error e;
        if (serve_request_parse((const char *)data, size, chat, sp, step, &r, &e) != 0) {
            REQUIRE(e.http == 400 && e.message[0] && strlen(e.message) < sizeof e.message);
            REQUIRE(!r.prompt && !r.msgs && !r.prompt_tokens && r.n_stop == 0);
            continue;
        }
        REQUIRE(r.chat == chat);
        if (chat) {
            REQUIRE(r.n_msgs >= 1 && r.msgs);
            for (int32_t i = 0; i < r.n_msgs; i++) REQUIRE(r.msgs[i].role && r.msgs[i].content);
        } else {
            REQUIRE((r.prompt != NULL) != (r.prompt_tokens != NULL));
            for (int32_t i = 0; i < r.n_prompt_tokens; i++) REQUIRE(r.prompt_tokens[i] >= 0);
        }
        REQUIRE(r.max_tokens == -1 || r.max_tokens >= 1);
        REQUIRE(r.sampling.temp >= 0.0f && r.sampling.temp <= 2.0f);
        REQUIRE(r.sampling.top_p > 0.0f && r.sampling.top_p <= 1.0f && r.sampling.top_k >= 0);
        REQUIRE(r.n_stop >= 0 && r.n_stop <= SERVE_MAX_STOP);
        for (int32_t i = 0; i < r.n_stop; i++) REQUIRE(r.stop[i] && strlen(r.stop[i]) >= 1 && strlen(r.stop[i]) <= SERVE_MAX_STOP_LEN);
        REQUIRE((int)r.step.selector >= 0 && r.step.selector < LOCKS_SEL_COUNT && r.step.budget >= 1);
        REQUIRE(r.step.mass >= 0.0f && r.step.mass < 1.0f && r.speculate >= 0);
        serve_request_free(&r);
    }
    return 0;
}
