/* request.c — JSON request bodies -> serve_request (see request.h). cJSON parses; every
 * field is checked here for type and range before anything is kept. */
#define _POSIX_C_SOURCE 200809L
#include "request.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(serve_error *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->http = 400;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    e->code = NULL;
    return -1;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

/* An integral JSON number in [lo, hi]. */
static int get_int(const cJSON *v, double lo, double hi, int64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < lo || d > hi) return 0;
    *out = (int64_t)d;
    return 1;
}

/* Chat content: a string, null (""), or an array of {type: "text", text} parts
 * (concatenated). Returns a malloc'ed string or NULL with *err filled. */
static char *content_text(const cJSON *c, serve_error *err) {
    if (!c || cJSON_IsNull(c)) return dup_str("");
    if (cJSON_IsString(c)) return dup_str(c->valuestring);
    if (!cJSON_IsArray(c)) {
        fail(err, "messages", "a message's 'content' must be a string or an array of text parts");
        return NULL;
    }
    size_t len = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0 || !cJSON_IsString(text)) {
            fail(err, "messages", "only content parts of type 'text' with a string 'text' are supported");
            return NULL;
        }
        len += strlen(text->valuestring);
    }
    char *out = malloc(len + 1);
    if (!out) return NULL;
    len = 0;
    cJSON_ArrayForEach(part, c) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t n = strlen(t);
        memcpy(out + len, t, n);
        len += n;
    }
    out[len] = '\0';
    return out;
}

static int parse_messages(const cJSON *msgs, serve_request *r, serve_error *err) {
    if (!cJSON_IsArray(msgs)) return fail(err, "messages", "'messages' must be an array of messages");
    int n = cJSON_GetArraySize(msgs);
    if (n < 1) return fail(err, "messages", "'messages' must hold at least one message");
    r->msgs = calloc((size_t)n, sizeof *r->msgs);
    if (!r->msgs) return fail(err, NULL, "out of memory");
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role))
            return fail(err, "messages", "each message must be an object with a string 'role'");
        const char *rs = role->valuestring;
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "developer"))
            return fail(err, "messages", "unknown message role '%.64s' (system, developer, user, assistant)", rs);
        char *content = content_text(cJSON_GetObjectItemCaseSensitive(m, "content"), err);
        if (!content) return -1;
        char *role_copy = dup_str(strcmp(rs, "developer") ? rs : "system");
        r->msgs[r->n_msgs].role = role_copy;
        r->msgs[r->n_msgs].content = content;
        r->n_msgs++;
        if (!role_copy) return fail(err, NULL, "out of memory");
    }
    return 0;
}

static int parse_prompt(const cJSON *p, serve_request *r, serve_error *err) {
    if (cJSON_IsString(p)) {
        r->prompt = dup_str(p->valuestring);
        return r->prompt ? 0 : fail(err, NULL, "out of memory");
    }
    if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) < 1)
        return fail(err, "prompt", "'prompt' must be a string, an array of one string or an array of token ids");
    const cJSON *first = cJSON_GetArrayItem(p, 0);
    if (cJSON_IsString(first)) {
        if (cJSON_GetArraySize(p) != 1) return fail(err, "prompt", "one prompt per request ('prompt' has several)");
        r->prompt = dup_str(first->valuestring);
        return r->prompt ? 0 : fail(err, NULL, "out of memory");
    }
    int n = cJSON_GetArraySize(p);
    r->prompt_tokens = malloc(sizeof(int32_t) * (size_t)n);
    if (!r->prompt_tokens) return fail(err, NULL, "out of memory");
    const cJSON *t;
    cJSON_ArrayForEach(t, p) {
        int64_t id;
        if (!get_int(t, 0, INT32_MAX, &id))
            return fail(err, "prompt", "'prompt' as an array holds token ids: integers >= 0");
        r->prompt_tokens[r->n_prompt_tokens++] = (int32_t)id;
    }
    return 0;
}

static int add_stop(const cJSON *one, serve_request *r, serve_error *err) {
    if (!cJSON_IsString(one)) return fail(err, "stop", "'stop' must be a string or an array of strings");
    size_t n = strlen(one->valuestring);
    if (n == 0 || n > SERVE_MAX_STOP_LEN)
        return fail(err, "stop", "a stop sequence must have 1 to %d bytes", SERVE_MAX_STOP_LEN);
    if (!(r->stop[r->n_stop] = dup_str(one->valuestring))) return fail(err, NULL, "out of memory");
    r->n_stop++;
    return 0;
}

static int parse_stop(const cJSON *s, serve_request *r, serve_error *err) {
    if (!s || cJSON_IsNull(s)) return 0;
    if (cJSON_IsString(s)) return add_stop(s, r, err);
    if (!cJSON_IsArray(s)) return fail(err, "stop", "'stop' must be a string or an array of strings");
    if (cJSON_GetArraySize(s) > SERVE_MAX_STOP) return fail(err, "stop", "at most %d stop sequences", SERVE_MAX_STOP);
    const cJSON *one;
    cJSON_ArrayForEach(one, s) if (add_stop(one, r, err)) return -1;
    return 0;
}

static int parse_locks(const cJSON *o, serve_request *r, serve_error *err) {
    if (!o || cJSON_IsNull(o)) return 0;
    if (!cJSON_IsObject(o)) return fail(err, "locks", "'locks' must be an object (selector, budget, mass, speculate)");
    const cJSON *v;
    int64_t i;
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "selector"))) {
        if (!cJSON_IsString(v) || locks_selector_parse(v->valuestring, &r->step.selector) != LOCKS_OK)
            return fail(err, "locks.selector", "'locks.selector' must name a selector (full, oracle, locks, quest, shadow, rocket)");
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "budget"))) {
        if (!get_int(v, 1, INT32_MAX, &i)) return fail(err, "locks.budget", "'locks.budget' must be an integer >= 1");
        r->step.budget = (int32_t)i;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "mass"))) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0.0 && v->valuedouble < 1.0))
            return fail(err, "locks.mass", "'locks.mass' must be a number in [0, 1) (0: fixed budget)");
        r->step.mass = (float)v->valuedouble;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "speculate"))) {
        if (!get_int(v, 0, 1 << 16, &i)) return fail(err, "locks.speculate", "'locks.speculate' must be an integer >= 0");
        r->speculate = (int32_t)i;
    }
    return 0;
}

static int parse_fields(const cJSON *root, int chat, serve_request *r, serve_error *err) {
    const cJSON *v;
    int64_t i;
    if (!cJSON_IsObject(root)) return fail(err, NULL, "the request body must be a JSON object");
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "model")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v)) return fail(err, "model", "'model' must be a string");
        if (!(r->model = dup_str(v->valuestring))) return fail(err, NULL, "out of memory");
    }
    if (chat) {
        if (parse_messages(cJSON_GetObjectItemCaseSensitive(root, "messages"), r, err)) return -1;
    } else {
        v = cJSON_GetObjectItemCaseSensitive(root, "prompt");
        if (!v) return fail(err, "prompt", "'prompt' is required");
        if (parse_prompt(v, r, err)) return -1;
    }
    const char *mt = "max_tokens";
    v = cJSON_GetObjectItemCaseSensitive(root, mt);
    if ((!v || cJSON_IsNull(v)) && chat) v = cJSON_GetObjectItemCaseSensitive(root, mt = "max_completion_tokens");
    if (v && !cJSON_IsNull(v)) {
        if (!get_int(v, 1, INT32_MAX, &i)) return fail(err, mt, "'%s' must be an integer >= 1", mt);
        r->max_tokens = (int32_t)i;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "temperature")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0.0 && v->valuedouble <= 2.0))
            return fail(err, "temperature", "'temperature' must be a number from 0 to 2");
        r->sampling.temp = (float)v->valuedouble;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "top_p")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble > 0.0 && v->valuedouble <= 1.0))
            return fail(err, "top_p", "'top_p' must be a number in (0, 1]");
        r->sampling.top_p = (float)v->valuedouble;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "top_k")) && !cJSON_IsNull(v)) {
        if (!get_int(v, 0, INT32_MAX, &i)) return fail(err, "top_k", "'top_k' must be an integer >= 0");
        r->sampling.top_k = (int32_t)i;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "seed")) && !cJSON_IsNull(v)) {
        /* 2^53: every integer a double holds exactly */
        if (!get_int(v, -9007199254740992.0, 9007199254740992.0, &i)) return fail(err, "seed", "'seed' must be an integer");
        r->sampling.seed = (uint64_t)i;
        r->seed_set = 1;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "n")) && !cJSON_IsNull(v)) {
        if (!get_int(v, 1, 1, &i)) return fail(err, "n", "only n = 1 is supported");
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "stream")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsBool(v)) return fail(err, "stream", "'stream' must be a boolean");
        r->stream = cJSON_IsTrue(v);
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "stream_options")) && !cJSON_IsNull(v)) {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(v, "include_usage");
        if (!cJSON_IsObject(v) || (u && !cJSON_IsBool(u)))
            return fail(err, "stream_options", "'stream_options' must be an object with a boolean 'include_usage'");
        r->include_usage = cJSON_IsTrue(u);
    }
    if (parse_stop(cJSON_GetObjectItemCaseSensitive(root, "stop"), r, err)) return -1;
    return parse_locks(cJSON_GetObjectItemCaseSensitive(root, "locks"), r, err);
}

int serve_request_parse(const char *body, size_t len, int chat, locks_sampler_params sampling,
                        locks_step_params step, serve_request *out, serve_error *err) {
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    out->chat = chat;
    out->max_tokens = -1;
    out->sampling = sampling;
    out->step = step;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) return fail(err, NULL, "the request body is not valid JSON");
    int rc = parse_fields(root, chat, out, err);
    cJSON_Delete(root);
    if (rc) serve_request_free(out);
    return rc;
}

void serve_request_free(serve_request *r) {
    if (!r) return;
    free(r->model);
    free(r->prompt);
    free(r->prompt_tokens);
    for (int32_t i = 0; i < r->n_msgs; i++) {
        free((char *)r->msgs[i].role);
        free((char *)r->msgs[i].content);
    }
    free(r->msgs);
    for (int32_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    int chat = r->chat;
    memset(r, 0, sizeof *r);
    r->chat = chat;
    r->max_tokens = -1;
}
