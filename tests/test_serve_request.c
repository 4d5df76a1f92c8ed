/*
 * test_serve_request.c — `locks serve`'s request parser (tools/serve/request.c): JSON
 * bodies -> serve_request. Built with the server only (libmicrohttpd + cJSON).
 *
 * Reference: requests drawn at random (temperature, top_p, top_k, seed, max_tokens,
 * stop strings and message text with quotes, escapes, control and non-ASCII
 * characters, the `locks` object) are written with cJSON and parsed back; every field
 * must come back as drawn, absent fields as the defaults. Bad bodies (malformed JSON,
 * wrong types, out-of-range values) must fail with 400, a message and the offending
 * field, leaving nothing allocated (ASan).
 */
#include "test_util.h"

#include <cjson/cJSON.h>

#include "request.h"

static locks_sampler_params dflt_sampling(void) { return locks_sampler_default_params(); }
static locks_step_params dflt_step(void) {
    locks_step_params s = locks_step_default_params();
    s.budget = 777;
    return s;
}

/* Random text of up to 40 bytes: ASCII with quotes, backslashes, control characters
 * and some two- and three-byte UTF-8 characters. */
static void rand_text(char *out, int min_len) {
    static const char *pieces[] = {"a", "Z", " ", "\"", "\\", "\n", "\t", "\x01", "é", "€", "<|im_end|>", "}", "{", "0"};
    int n = tu_int(min_len, 12), len = 0;
    for (int i = 0; i < n; i++) {
        const char *p = pieces[tu_int(0, (int)(sizeof pieces / sizeof pieces[0]) - 1)];
        size_t pl = strlen(p);
        memcpy(out + len, p, pl);
        len += (int)pl;
    }
    out[len] = '\0';
}

static void check_random(int chat) {
    char text[8][200], stop[4][200];
    cJSON *o = cJSON_CreateObject();
    SETUP(o);
    int nm = tu_int(1, 4), has_temp = tu_int(0, 1), has_max = tu_int(0, 1), n_stop = tu_int(0, 4);
    double temp = tu_int(0, 200) / 100.0, top_p = tu_int(1, 100) / 100.0;
    int max_tokens = tu_int(1, 100000), top_k = tu_int(0, 100), budget = tu_int(1, 1 << 20);
    int64_t seed = (int64_t)tu_int(0, 1 << 30) * (tu_int(0, 1) ? -1 : 1);
    static const char *roles[] = {"system", "user", "assistant"};
    int role[8];
    if (chat) {
        cJSON *msgs = cJSON_AddArrayToObject(o, "messages");
        for (int i = 0; i < nm; i++) {
            cJSON *m = cJSON_CreateObject();
            role[i] = tu_int(0, 2);
            rand_text(text[i], 0);
            cJSON_AddStringToObject(m, "role", roles[role[i]]);
            if (tu_int(0, 1)) {
                cJSON_AddStringToObject(m, "content", text[i]);
            } else { /* as content parts, split in two */
                cJSON *parts = cJSON_AddArrayToObject(m, "content");
                size_t half = strlen(text[i]) / 2;
                char a[200];
                memcpy(a, text[i], half);
                a[half] = '\0';
                for (int k = 0; k < 2; k++) {
                    cJSON *p = cJSON_CreateObject();
                    cJSON_AddStringToObject(p, "type", "text");
                    cJSON_AddStringToObject(p, "text", k ? text[i] + half : a);
                    cJSON_AddItemToArray(parts, p);
                }
            }
            cJSON_AddItemToArray(msgs, m);
        }
    } else {
        rand_text(text[0], 1);
        cJSON_AddStringToObject(o, "prompt", text[0]);
    }
    if (has_temp) cJSON_AddNumberToObject(o, "temperature", temp);
    if (has_max) cJSON_AddNumberToObject(o, chat && tu_int(0, 1) ? "max_completion_tokens" : "max_tokens", max_tokens);
    cJSON_AddNumberToObject(o, "top_p", top_p);
    cJSON_AddNumberToObject(o, "top_k", top_k);
    cJSON_AddNumberToObject(o, "seed", (double)seed);
    cJSON_AddBoolToObject(o, "stream", tu_int(0, 1));
    if (n_stop == 1 && tu_int(0, 1)) {
        rand_text(stop[0], 1);
        cJSON_AddStringToObject(o, "stop", stop[0]);
    } else {
        cJSON *st = cJSON_AddArrayToObject(o, "stop");
        for (int i = 0; i < n_stop; i++) {
            rand_text(stop[i], 1);
            cJSON_AddItemToArray(st, cJSON_CreateString(stop[i]));
        }
    }
    cJSON *l = cJSON_AddObjectToObject(o, "locks");
    cJSON_AddStringToObject(l, "selector", "full");
    cJSON_AddNumberToObject(l, "budget", budget);
    cJSON_AddNumberToObject(l, "mass", 0.5);
    cJSON_AddStringToObject(o, "unknown_field", "ignored");
    char *body = cJSON_PrintUnformatted(o);
    SETUP(body);
    serve_request r;
    serve_error e;
    int rc = serve_request_parse(body, strlen(body), chat, dflt_sampling(), dflt_step(), &r, &e);
    test_cond(rc == 0, "random %s request rejected: %s (%s)\n  %s", chat ? "chat" : "completion", e.message, e.param, body);
    if (rc == 0) {
        int ok = 1;
        if (chat) {
            ok &= r.n_msgs == nm;
            for (int i = 0; i < nm && i < r.n_msgs; i++)
                ok &= !strcmp(r.msgs[i].role, roles[role[i]]) && !strcmp(r.msgs[i].content, text[i]);
        } else {
            ok &= r.prompt && !strcmp(r.prompt, text[0]) && !r.prompt_tokens;
        }
        ok &= r.sampling.temp == (has_temp ? (float)temp : dflt_sampling().temp);
        ok &= r.max_tokens == (has_max ? max_tokens : -1);
        ok &= r.sampling.top_p == (float)top_p && r.sampling.top_k == top_k;
        ok &= r.seed_set && r.sampling.seed == (uint64_t)seed;
        ok &= r.n_stop == n_stop;
        for (int i = 0; i < n_stop && i < r.n_stop; i++) ok &= !strcmp(r.stop[i], stop[i]);
        ok &= r.step.selector == LOCKS_SEL_FULL && r.step.budget == budget && r.step.mass == 0.5f;
        ok &= r.step.n_sink == dflt_step().n_sink && r.speculate == 0;
        test_cond(ok, "random %s request parsed back wrong:\n  %s", chat ? "chat" : "completion", body);
        serve_request_free(&r);
    }
    free(body);
    cJSON_Delete(o);
}

static void check_bad(const char *body, int chat, const char *param) {
    serve_request r;
    serve_error e;
    int rc = serve_request_parse(body, strlen(body), chat, dflt_sampling(), dflt_step(), &r, &e);
    test_cond(rc == -1 && e.http == 400 && e.message[0] && !strcmp(e.param, param),
              "bad body %s: rc %d, http %d, param '%s' (expected '%s'), message '%s'", body, rc, e.http, e.param, param,
              e.message);
    if (rc == 0) serve_request_free(&r);
}

int main(void) {
    tu_seed("test_serve_request");
    for (int i = 0; i < 300; i++) check_random(i & 1);

    /* defaults: nothing but the prompt */
    serve_request r;
    serve_error e;
    const char *min = "{\"prompt\": [1, 2, 3]}";
    test_cond(serve_request_parse(min, strlen(min), 0, dflt_sampling(), dflt_step(), &r, &e) == 0 && r.n_prompt_tokens == 3 &&
                  r.prompt_tokens[2] == 3 && !r.prompt && r.max_tokens == -1 && !r.seed_set && !r.stream &&
                  r.step.budget == 777 && r.n_stop == 0,
              "token-id prompt with defaults");
    serve_request_free(&r);
    /* not NUL-terminated: the length is what counts */
    const char *cut = "{\"prompt\": \"abc\"}garbage";
    test_cond(serve_request_parse(cut, 17, 0, dflt_sampling(), dflt_step(), &r, &e) == 0 && !strcmp(r.prompt, "abc"),
              "body parsed by its length");
    serve_request_free(&r);

    check_bad("", 0, "");
    check_bad("{\"prompt\": \"x\"", 0, "");
    check_bad("[1, 2]", 0, "");
    check_bad("{}", 0, "prompt");
    check_bad("{\"prompt\": 3}", 0, "prompt");
    check_bad("{\"prompt\": [\"a\", \"b\"]}", 0, "prompt");
    check_bad("{\"prompt\": [1, -2]}", 0, "prompt");
    check_bad("{\"prompt\": [1, 2.5]}", 0, "prompt");
    check_bad("{\"prompt\": \"x\", \"model\": 1}", 0, "model");
    check_bad("{\"prompt\": \"x\", \"max_tokens\": 0}", 0, "max_tokens");
    check_bad("{\"prompt\": \"x\", \"max_tokens\": \"5\"}", 0, "max_tokens");
    check_bad("{\"prompt\": \"x\", \"max_tokens\": 1e300}", 0, "max_tokens");
    check_bad("{\"prompt\": \"x\", \"temperature\": 2.5}", 0, "temperature");
    check_bad("{\"prompt\": \"x\", \"temperature\": -0.1}", 0, "temperature");
    check_bad("{\"prompt\": \"x\", \"top_p\": 0}", 0, "top_p");
    check_bad("{\"prompt\": \"x\", \"top_k\": -1}", 0, "top_k");
    check_bad("{\"prompt\": \"x\", \"seed\": 1.5}", 0, "seed");
    check_bad("{\"prompt\": \"x\", \"n\": 2}", 0, "n");
    check_bad("{\"prompt\": \"x\", \"stream\": 1}", 0, "stream");
    check_bad("{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": 1}}", 0, "stream_options");
    check_bad("{\"prompt\": \"x\", \"stop\": \"\"}", 0, "stop");
    check_bad("{\"prompt\": \"x\", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", 0, "stop");
    check_bad("{\"prompt\": \"x\", \"stop\": [\"a\", 2]}", 0, "stop");
    check_bad("{\"prompt\": \"x\", \"locks\": 5}", 0, "locks");
    check_bad("{\"prompt\": \"x\", \"locks\": {\"selector\": \"nope\"}}", 0, "locks.selector");
    check_bad("{\"prompt\": \"x\", \"locks\": {\"budget\": 0}}", 0, "locks.budget");
    check_bad("{\"prompt\": \"x\", \"locks\": {\"mass\": 1}}", 0, "locks.mass");
    check_bad("{\"prompt\": \"x\", \"locks\": {\"speculate\": -1}}", 0, "locks.speculate");
    check_bad("{}", 1, "messages");
    check_bad("{\"messages\": []}", 1, "messages");
    check_bad("{\"messages\": {}}", 1, "messages");
    check_bad("{\"messages\": [{\"content\": \"x\"}]}", 1, "messages");
    check_bad("{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", 1, "messages");
    check_bad("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", 1, "messages");
    check_bad("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"tool\", \"content\": \"b\"}]}", 1,
              "messages");
    return test_report("test_serve_request");
}
