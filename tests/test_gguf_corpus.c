/*
 * test_gguf_corpus.c — every file of tests/fuzz/corpus/ through the GGUF reader, both
 * from an exact-size heap buffer (gguf_open_buffer: ASan catches any read past it) and
 * from the file (gguf_open: mmap), then through every accessor and the tokenizer
 * (tests/fuzz/gguf_walk.h). The file name says what must happen
 * (scripts/gen_gguf_corpus.py writes the named ones; the fuzzer adds the rest):
 *   ok-*      opens; a tokenizer in it builds
 *   bad-*     refused with LOCKS_ERR_FORMAT or LOCKS_ERR_UNSUPPORTED and a log line
 *   tokbad-*  opens; locks_tokenizer_from_gguf refuses it with a log line
 *   other     anything but a crash; both opens agree
 */
#include "test_util.h"

#include <dirent.h>

#include "fuzz/gguf_walk.h"

#define CORPUS "tests/fuzz/corpus"

static char last_log[1024];

static void on_log(locks_log_level level, const char *msg, void *user) {
    (void)user;
    if (level == LOCKS_LOG_ERROR) snprintf(last_log, sizeof last_log, "%s", msg);
}

static int starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void check_file(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", CORPUS, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        test_cond(0, "%s: cannot open", path);
        return;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(size > 0 ? (size_t)size : 1);
    size_t got = fread(buf, 1, (size_t)size, f);
    fclose(f);
    test_cond(got == (size_t)size, "%s: short read", name);

    locks_status st_buf, st_file;
    last_log[0] = '\0';
    gguf *g = gguf_open_buffer(buf, (size_t)size, &st_buf);
    char log_buf[1024];
    snprintf(log_buf, sizeof log_buf, "%s", last_log);
    gguf *gf = gguf_open(path, &st_file);
    test_cond(st_buf == st_file, "%s: buffer open says %s, file open says %s", name, locks_status_str(st_buf),
              locks_status_str(st_file));

    locks_status tok_st = LOCKS_ERR_INVALID_ARG;
    if (g) {
        last_log[0] = '\0';
        uint64_t h = gguf_walk(g, &tok_st);
        if (gf) test_cond(gguf_walk(gf, NULL) == h, "%s: buffer and file walks differ", name);
    } else {
        test_cond(log_buf[0] != '\0', "%s: refused (%s) without saying why", name, locks_status_str(st_buf));
    }

    if (starts_with(name, "ok-")) {
        test_cond(g != NULL, "%s: refused: %s (%s)", name, locks_status_str(st_buf), log_buf);
        test_cond(tok_st == LOCKS_OK || tok_st == LOCKS_ERR_INVALID_ARG, "%s: tokenizer: %s (%s)", name,
                  locks_status_str(tok_st), last_log);
    } else if (starts_with(name, "bad-")) {
        test_cond(!g && (st_buf == LOCKS_ERR_FORMAT || st_buf == LOCKS_ERR_UNSUPPORTED),
                  "%s: expected a FORMAT/UNSUPPORTED refusal, got %s", name, locks_status_str(st_buf));
    } else if (starts_with(name, "tokbad-")) {
        test_cond(g != NULL, "%s: refused: %s (%s)", name, locks_status_str(st_buf), log_buf);
        test_cond(g == NULL || (tok_st != LOCKS_OK && tok_st != LOCKS_ERR_INVALID_ARG && last_log[0] != '\0'),
                  "%s: tokenizer should be refused with a log line, got %s", name, locks_status_str(tok_st));
    }
    if (getenv("CORPUS_VERBOSE"))
        printf("%-36s %6ld B  open %-16s tokenizer %-16s %s\n", name, size, locks_status_str(st_buf),
               g ? locks_status_str(tok_st) : "-", g ? last_log : log_buf);
    gguf_close(g);
    gguf_close(gf);
    free(buf);
}

int main(void) {
    tu_seed("test_gguf_corpus");
    locks_set_log(on_log, NULL);
    DIR *d = opendir(CORPUS);
    if (!d) {
        fprintf(stderr, "cannot open %s (run from the repository root)\n", CORPUS);
        return 1;
    }
    char *names[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 4096)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    int n_ok = 0, n_bad = 0, n_tokbad = 0;
    for (int i = 0; i < n; i++) {
        check_file(names[i]);
        n_ok += starts_with(names[i], "ok-");
        n_bad += starts_with(names[i], "bad-");
        n_tokbad += starts_with(names[i], "tokbad-");
        free(names[i]);
    }
    printf("corpus: %d files (%d ok-, %d bad-, %d tokbad-, %d fuzzer-found)\n", n, n_ok, n_bad, n_tokbad,
           n - n_ok - n_bad - n_tokbad);
    test_cond(n_ok >= 3 && n_bad >= 30 && n_tokbad >= 5, "corpus is missing its named files");
    locks_set_log(NULL, NULL);
    return test_report("test_gguf_corpus");
}
