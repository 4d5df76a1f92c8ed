/*
 * tokenizer.c — GPT-2-style byte-level BPE from a GGUF vocabulary, plus ChatML.
 *
 * At init every token's text is turned into the raw bytes it stands for (NORMAL tokens
 * through the inverse of GPT-2's byte-to-unicode map; CONTROL/USER_DEFINED tokens are
 * plain text), and every merge "a b" into a pair of token ids (id(a), id(b)) -> (rank,
 * id(ab)) in a hash map. Encoding then never touches strings again: a piece of text
 * starts as one symbol per byte (the id of that byte's token) and adjacent symbol pairs
 * are merged lowest rank first — the leftmost pair on ties — through a binary heap of
 * candidate pairs, O(n log n) in the piece length.
 *
 * What always holds: decode(encode(x)) == x for every byte string x whose bytes all
 * have a token, because every byte of x ends up, in order, in exactly one token whose
 * raw bytes it is part of. A byte with no token is dropped, as the reference
 * implementations do (SmolLM2 lacks 21 of the 256: 0x04 0x06 0x13 0x14 0x16 0x1D, and
 * 0xC0 0xC1 0xF1 0xF2 0xF5..0xFF, which valid UTF-8 below U+40000 never uses).
 *
 * Sections: byte <-> unicode map · UTF-8 and Unicode classes · hash maps · init/free ·
 * BPE · pre-tokenizer · encode · decode · ChatML.
 */
#include "locks_model.h"
#include "unicode_tables.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum { PRE_GPT2 = 0, PRE_GPT2_DIGITS } pre_kind;

/* Open-addressing map from byte strings to token ids. The key of id i is
 * arena[off[i], off[i+1]); slots hold ids, -1 when empty. */
typedef struct {
    int32_t *slot;
    uint32_t mask;
    const char *arena;
    const uint32_t *off;
} strmap;

/* Open-addressing map from a token id pair (key = left << 32 | right) to the merge. */
typedef struct {
    uint64_t key; /* PAIR_EMPTY when empty */
    int32_t rank;
    int32_t id; /* the merged token */
} pair_slot;
#define PAIR_EMPTY UINT64_MAX

#define MAX_EOG 6

struct locks_tokenizer {
    int32_t n_vocab;
    uint8_t *type;  /* (n_vocab,) locks_token_type */
    char *raw;      /* all tokens' raw bytes, concatenated */
    uint32_t *off;  /* (n_vocab + 1,) token i = raw[off[i], off[i+1]) */
    strmap by_raw;  /* raw bytes -> id; CONTROL/USER_DEFINED win over others */
    pair_slot *pairs;
    uint32_t pair_mask;
    int32_t byte_id[256]; /* token of each single byte, -1 if none */
    int32_t *special;     /* CONTROL + USER_DEFINED ids, longest text first */
    int32_t n_special;
    uint8_t special_first[32]; /* bitmap of the first bytes of special texts */
    pre_kind pre;
    float *score; /* (n_vocab,) SentencePiece scores; NULL for byte-level BPE */
    strmap by_text; /* SentencePiece: raw bytes -> id of the tokens merges may form
                     * (NORMAL, UNKNOWN, UNUSED; not special, not BYTE) */
    locks_token_ids ids;
    int32_t eog[MAX_EOG];
    int32_t n_eog;
};

/* ------------------------------------------------------------------------------ */
/* Byte <-> unicode map (GPT-2)                                                     */
/* ------------------------------------------------------------------------------ */

/* GPT-2 shows each byte as a printable code point: the printable Latin-1 bytes
 * ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) as themselves, the other 68 bytes, in order, as
 * U+0100, U+0101, ... So ' ' (0x20) is U+0120 'Ġ' and '\n' is U+010A 'Ċ'. */
static int byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static void byte_unicode_tables(uint32_t byte_to_cp[256], int16_t cp_to_byte[324]) {
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) byte_to_cp[b] = byte_is_printable(b) ? (uint32_t)b : next++;
    for (int c = 0; c < 324; c++) cp_to_byte[c] = -1;
    for (int b = 0; b < 256; b++) cp_to_byte[byte_to_cp[b]] = (int16_t)b;
}

/* ------------------------------------------------------------------------------ */
/* UTF-8 and Unicode classes                                                        */
/* ------------------------------------------------------------------------------ */

#define CP_INVALID UINT32_MAX

/* Decodes the code point at s[i] (i < n) into *cp and returns its length. A byte that
 * does not start a well-formed sequence (overlong, surrogate, > U+10FFFF, truncated)
 * is one unit of length 1 with *cp = CP_INVALID. */
static size_t utf8_next(const uint8_t *s, size_t n, size_t i, uint32_t *cp) {
    uint8_t b = s[i];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    uint32_t c;
    if (b >= 0xC2 && b <= 0xDF) {
        len = 2;
        c = b & 0x1Fu;
    } else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        c = b & 0x0Fu;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        c = b & 0x07u;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        *cp = CP_INVALID;
        return 1;
    }
    if (n - i < len || s[i + 1] < lo || s[i + 1] > hi) {
        *cp = CP_INVALID;
        return 1;
    }
    for (size_t k = 1; k < len; k++) {
        if ((s[i + k] & 0xC0) != 0x80) {
            *cp = CP_INVALID;
            return 1;
        }
        c = (c << 6) | (s[i + k] & 0x3Fu);
    }
    *cp = c;
    return len;
}

static size_t utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

typedef locks_unicode_cls cp_class;
#define CP_LETTER LOCKS_UC_LETTER
#define CP_NUMBER LOCKS_UC_NUMBER
#define CP_SPACE LOCKS_UC_SPACE
#define CP_OTHER LOCKS_UC_OTHER

static cp_class cp_classify(uint32_t cp) {
    return cp == CP_INVALID ? CP_OTHER : locks_unicode_class(cp);
}

/* ------------------------------------------------------------------------------ */
/* Hash maps                                                                        */
/* ------------------------------------------------------------------------------ */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static uint32_t table_size(int64_t n) {
    uint32_t cap = 16;
    while ((int64_t)cap < 2 * n) cap <<= 1;
    return cap;
}

static locks_status strmap_init(strmap *m, int64_t n, const char *arena, const uint32_t *off) {
    uint32_t cap = table_size(n);
    m->slot = locks_alloc(cap, sizeof *m->slot);
    if (!m->slot) return LOCKS_ERR_OOM;
    for (uint32_t i = 0; i < cap; i++) m->slot[i] = -1;
    m->mask = cap - 1;
    m->arena = arena;
    m->off = off;
    return LOCKS_OK;
}

static int32_t strmap_get(const strmap *m, const char *s, size_t n) {
    for (uint32_t h = (uint32_t)hash_bytes(s, n) & m->mask;; h = (h + 1) & m->mask) {
        int32_t id = m->slot[h];
        if (id < 0) return -1;
        size_t klen = m->off[id + 1] - m->off[id];
        if (klen == n && memcmp(m->arena + m->off[id], s, n) == 0) return id;
    }
}

/* Inserts id under its key unless the key is present (the first id inserted wins). */
static void strmap_put(strmap *m, int32_t id) {
    const char *s = m->arena + m->off[id];
    size_t n = m->off[id + 1] - m->off[id];
    uint32_t h = (uint32_t)hash_bytes(s, n) & m->mask;
    for (;; h = (h + 1) & m->mask) {
        int32_t cur = m->slot[h];
        if (cur < 0) break;
        if (m->off[cur + 1] - m->off[cur] == n && memcmp(m->arena + m->off[cur], s, n) == 0)
            return;
    }
    m->slot[h] = id;
}

static const pair_slot *pair_get(const locks_tokenizer *t, int32_t left, int32_t right) {
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    for (uint32_t h = (uint32_t)hash_u64(key) & t->pair_mask;; h = (h + 1) & t->pair_mask) {
        if (t->pairs[h].key == key) return &t->pairs[h];
        if (t->pairs[h].key == PAIR_EMPTY) return NULL;
    }
}

/* Adds a merge unless the pair already has one (the earlier, lower rank wins). */
static void pair_put(locks_tokenizer *t, int32_t left, int32_t right, int32_t rank, int32_t id) {
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    uint32_t h = (uint32_t)hash_u64(key) & t->pair_mask;
    while (t->pairs[h].key != PAIR_EMPTY) {
        if (t->pairs[h].key == key) return;
        h = (h + 1) & t->pair_mask;
    }
    t->pairs[h] = (pair_slot){key, rank, id};
}

/* ------------------------------------------------------------------------------ */
/* Init / free                                                                      */
/* ------------------------------------------------------------------------------ */

static int parse_byte_token(const char *s, int *byte) {
    /* "<0xAB>" */
    if (strlen(s) != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return 0;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = s[k];
        int d = (c >= '0' && c <= '9')   ? c - '0'
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                         : -1;
        if (d < 0) return 0;
        v = v * 16 + d;
    }
    *byte = v;
    return 1;
}

typedef struct {
    uint32_t len;
    int32_t id;
} special_key;

static int cmp_special(const void *a, const void *b) {
    const special_key *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1; /* longest first */
    return (x->id > y->id) - (x->id < y->id);
}

/* Orders the special tokens longest text first (ties: lower id), so that the first
 * match at a position is the longest. */
static locks_status sort_specials(locks_tokenizer *t) {
    special_key *k = locks_alloc((size_t)t->n_special + 1, sizeof *k);
    if (!k) return LOCKS_ERR_OOM;
    for (int32_t i = 0; i < t->n_special; i++) {
        int32_t id = t->special[i];
        k[i] = (special_key){t->off[id + 1] - t->off[id], id};
    }
    qsort(k, (size_t)t->n_special, sizeof *k, cmp_special);
    for (int32_t i = 0; i < t->n_special; i++) t->special[i] = k[i].id;
    locks_free(k);
    return LOCKS_OK;
}

static int pre_parse(const char *pre, pre_kind *out) {
    static const char *const digits[] = {"smollm", "starcoder", "refact", "codeshell"};
    if (!pre || strcmp(pre, "gpt2") == 0 || strcmp(pre, "default") == 0) {
        *out = PRE_GPT2;
        return 1;
    }
    for (size_t i = 0; i < sizeof digits / sizeof digits[0]; i++) {
        if (strcmp(pre, digits[i]) == 0) {
            *out = PRE_GPT2_DIGITS;
            return 1;
        }
    }
    return 0;
}

static void find_eog(locks_tokenizer *t) {
    static const char *const names[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"};
    t->n_eog = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int32_t id = locks_tokenizer_find(t, names[i], strlen(names[i]));
        if (id >= 0 && t->type[id] == LOCKS_TOKEN_CONTROL && t->n_eog < MAX_EOG) t->eog[t->n_eog++] = id;
    }
}

/* Byte-level BPE (scores == NULL) or SentencePiece (scores, no merges). */
static locks_tokenizer *tok_init(const char *const *tokens, const int32_t *types, const float *scores,
                                 int32_t n_tokens, const char *const *merges, int32_t n_merges,
                                 const char *pre, locks_status *err) {
    locks_status st = LOCKS_ERR_INVALID_ARG;
    locks_tokenizer *t = NULL;
    char *enc = NULL; /* GGUF texts, for resolving merges */
    uint32_t *enc_off = NULL;
    strmap by_enc = {0};
    char *scratch = NULL;
    pre_kind kind;

    if (!tokens || n_tokens <= 0 || n_tokens >= INT32_MAX || n_merges < 0 || (n_merges > 0 && !merges))
        goto fail;
    if (!pre_parse(pre, &kind)) {
        locks_log(LOCKS_LOG_ERROR, "tokenizer: unknown pre-tokenizer '%s'", pre);
        st = LOCKS_ERR_UNSUPPORTED;
        goto fail;
    }
    size_t total = 0;
    for (int32_t i = 0; i < n_tokens; i++) {
        if (!tokens[i]) goto fail;
        if (types && (types[i] < 0 || types[i] > LOCKS_TOKEN_BYTE)) goto fail;
        total += strlen(tokens[i]);
        if (total > UINT32_MAX / 2) goto fail;
    }

    st = LOCKS_ERR_OOM;
    t = locks_alloc(1, sizeof *t);
    if (!t) goto fail;
    t->n_vocab = n_tokens;
    t->pre = kind;
    t->ids = (locks_token_ids){-1, -1, -1, -1};
    t->type = locks_alloc((size_t)n_tokens, 1);
    t->off = locks_alloc((size_t)n_tokens + 1, sizeof *t->off);
    t->raw = locks_alloc(total + 1, 1); /* decoding never lengthens a text */
    enc = locks_alloc(total + 1, 1);
    enc_off = locks_alloc((size_t)n_tokens + 1, sizeof *enc_off);
    if (!t->type || !t->off || !t->raw || !enc || !enc_off) goto fail;
    if (scores) {
        t->score = locks_alloc((size_t)n_tokens, sizeof *t->score);
        if (!t->score) goto fail;
        memcpy(t->score, scores, (size_t)n_tokens * sizeof *t->score);
    }

    /* Raw bytes of every token. */
    uint32_t byte_to_cp[256];
    int16_t cp_to_byte[324];
    byte_unicode_tables(byte_to_cp, cp_to_byte);
    uint32_t pos = 0, epos = 0;
    int32_t n_special = 0;
    for (int32_t i = 0; i < n_tokens; i++) {
        const uint8_t *s = (const uint8_t *)tokens[i];
        size_t n = strlen(tokens[i]);
        locks_token_type ty = types ? (locks_token_type)types[i] : LOCKS_TOKEN_NORMAL;
        t->type[i] = (uint8_t)ty;
        t->off[i] = pos;
        enc_off[i] = epos;
        memcpy(enc + epos, s, n);
        epos += (uint32_t)n;
        int byte;
        if (ty == LOCKS_TOKEN_CONTROL || ty == LOCKS_TOKEN_USER_DEFINED) {
            memcpy(t->raw + pos, s, n);
            pos += (uint32_t)n;
            if (n > 0) n_special++;
        } else if (ty == LOCKS_TOKEN_BYTE && parse_byte_token(tokens[i], &byte)) {
            t->raw[pos++] = (char)byte;
        } else if (scores) { /* SentencePiece: U+2581 (E2 96 81) stands for a space */
            for (size_t k = 0; k < n;) {
                if (k + 3 <= n && s[k] == 0xE2 && s[k + 1] == 0x96 && s[k + 2] == 0x81) {
                    t->raw[pos++] = ' ';
                    k += 3;
                } else {
                    t->raw[pos++] = (char)s[k++];
                }
            }
        } else {
            for (size_t k = 0; k < n;) {
                uint32_t cp;
                size_t l = utf8_next(s, n, k, &cp);
                if (cp < 324 && cp_to_byte[cp] >= 0) {
                    t->raw[pos++] = (char)cp_to_byte[cp];
                } else { /* not in GPT-2's alphabet: keep the text as it is */
                    memcpy(t->raw + pos, s + k, l);
                    pos += (uint32_t)l;
                }
                k += l;
            }
        }
    }
    t->off[n_tokens] = pos;
    enc_off[n_tokens] = epos;

    /* Raw-bytes map: special tokens first, so they win lookups by text, then the
     * others, BYTE tokens last (a text token "a" wins over <0x61>). */
    if (strmap_init(&t->by_raw, n_tokens, t->raw, t->off) != LOCKS_OK) goto fail;
    for (int pass = 0; pass < 3; pass++) {
        for (int32_t i = 0; i < n_tokens; i++) {
            int sp = t->type[i] == LOCKS_TOKEN_CONTROL || t->type[i] == LOCKS_TOKEN_USER_DEFINED;
            int cls = sp ? 0 : t->type[i] == LOCKS_TOKEN_BYTE ? 2 : 1;
            if (cls == pass) strmap_put(&t->by_raw, i);
        }
    }

    /* Special tokens, longest first, and the bitmap of their first bytes. */
    t->special = locks_alloc((size_t)n_special + 1, sizeof *t->special);
    if (!t->special) goto fail;
    for (int32_t i = 0; i < n_tokens; i++) {
        int sp = t->type[i] == LOCKS_TOKEN_CONTROL || t->type[i] == LOCKS_TOKEN_USER_DEFINED;
        if (sp && t->off[i + 1] > t->off[i]) {
            t->special[t->n_special++] = i;
            uint8_t b = (uint8_t)t->raw[t->off[i]];
            t->special_first[b >> 3] |= (uint8_t)(1u << (b & 7));
        }
    }
    if (sort_specials(t) != LOCKS_OK) goto fail;
    if (scores) {
        if (strmap_init(&t->by_text, n_tokens, t->raw, t->off) != LOCKS_OK) goto fail;
        for (int32_t i = 0; i < n_tokens; i++)
            if (t->type[i] != LOCKS_TOKEN_CONTROL && t->type[i] != LOCKS_TOKEN_USER_DEFINED &&
                t->type[i] != LOCKS_TOKEN_BYTE)
                strmap_put(&t->by_text, i);
    }

    /* Byte tokens: GPT-2's single-character tokens, else "<0xAB>" BYTE tokens. */
    if (strmap_init(&by_enc, n_tokens, enc, enc_off) != LOCKS_OK) goto fail;
    for (int32_t i = 0; i < n_tokens; i++) strmap_put(&by_enc, i);
    for (int b = 0; b < 256; b++) {
        char buf[4];
        size_t l = utf8_put(byte_to_cp[b], buf);
        t->byte_id[b] = scores ? -1 : strmap_get(&by_enc, buf, l); /* SentencePiece: BYTE tokens only */
    }
    for (int32_t i = 0; i < n_tokens; i++) {
        int byte;
        if (t->type[i] == LOCKS_TOKEN_BYTE && parse_byte_token(tokens[i], &byte) && t->byte_id[byte] < 0)
            t->byte_id[byte] = i;
    }

    /* Merges: "a b" -> (id(a), id(b)) -> (rank, id(ab)). */
    t->pair_mask = table_size(n_merges) - 1;
    t->pairs = locks_alloc((size_t)t->pair_mask + 1, sizeof *t->pairs);
    if (!t->pairs) goto fail;
    for (uint32_t i = 0; i <= t->pair_mask; i++) t->pairs[i].key = PAIR_EMPTY;
    size_t scratch_cap = 0;
    int32_t skipped = 0;
    for (int32_t r = 0; r < n_merges; r++) {
        const char *m = merges[r];
        const char *sp = m ? strchr(m + (m[0] != '\0'), ' ') : NULL;
        if (!sp) {
            skipped++;
            continue;
        }
        size_t ll = (size_t)(sp - m), rl = strlen(sp + 1);
        if (ll + rl > scratch_cap) {
            locks_free(scratch);
            scratch_cap = 2 * (ll + rl) + 64;
            scratch = locks_alloc(scratch_cap, 1);
            if (!scratch) goto fail;
        }
        memcpy(scratch, m, ll);
        memcpy(scratch + ll, sp + 1, rl);
        int32_t a = strmap_get(&by_enc, m, ll);
        int32_t b = strmap_get(&by_enc, sp + 1, rl);
        int32_t ab = strmap_get(&by_enc, scratch, ll + rl);
        if (a < 0 || b < 0 || ab < 0) {
            skipped++;
            continue;
        }
        pair_put(t, a, b, r, ab);
    }
    if (skipped > 0)
        locks_log(LOCKS_LOG_WARN, "tokenizer: skipped %d of %d merges (tokens not in vocabulary)",
                  skipped, n_merges);

    find_eog(t);
    locks_free(scratch);
    locks_free(by_enc.slot);
    locks_free(enc);
    locks_free(enc_off);
    if (err) *err = LOCKS_OK;
    return t;

fail:
    locks_free(scratch);
    locks_free(by_enc.slot);
    locks_free(enc);
    locks_free(enc_off);
    locks_tokenizer_free(t);
    if (err) *err = st;
    return NULL;
}

locks_tokenizer *locks_tokenizer_init(const char *const *tokens, const int32_t *types,
                                      int32_t n_tokens, const char *const *merges,
                                      int32_t n_merges, const char *pre, locks_status *err) {
    return tok_init(tokens, types, NULL, n_tokens, merges, n_merges, pre, err);
}

locks_tokenizer *locks_tokenizer_init_spm(const char *const *tokens, const int32_t *types,
                                          const float *scores, int32_t n_tokens, locks_status *err) {
    if (!scores) {
        if (err) *err = LOCKS_ERR_INVALID_ARG;
        return NULL;
    }
    for (int32_t i = 0; i < n_tokens; i++)
        if (!isfinite(scores[i])) {
            if (err) *err = LOCKS_ERR_INVALID_ARG;
            return NULL;
        }
    return tok_init(tokens, types, scores, n_tokens, NULL, 0, NULL, err);
}

void locks_tokenizer_free(locks_tokenizer *t) {
    if (!t) return;
    locks_free(t->type);
    locks_free(t->raw);
    locks_free(t->off);
    locks_free(t->by_raw.slot);
    locks_free(t->pairs);
    locks_free(t->special);
    locks_free(t->score);
    locks_free(t->by_text.slot);
    locks_free(t);
}

int32_t locks_tokenizer_n_vocab(const locks_tokenizer *t) { return t ? t->n_vocab : 0; }

locks_status locks_tokenizer_set_special(locks_tokenizer *t, locks_token_ids ids) {
    if (!t) return LOCKS_ERR_INVALID_ARG;
    int32_t v[4] = {ids.bos, ids.eos, ids.unk, ids.pad};
    for (int i = 0; i < 4; i++)
        if (v[i] < -1 || v[i] >= t->n_vocab) return LOCKS_ERR_INVALID_ARG;
    t->ids = ids;
    return LOCKS_OK;
}

locks_token_ids locks_tokenizer_special(const locks_tokenizer *t) {
    return t ? t->ids : (locks_token_ids){-1, -1, -1, -1};
}

locks_token_type locks_tokenizer_type(const locks_tokenizer *t, int32_t id) {
    if (!t || id < 0 || id >= t->n_vocab) return LOCKS_TOKEN_UNDEFINED;
    return (locks_token_type)t->type[id];
}

int32_t locks_tokenizer_find(const locks_tokenizer *t, const char *text, size_t len) {
    if (!t || (!text && len > 0)) return -1;
    return strmap_get(&t->by_raw, text ? text : "", len);
}

bool locks_tokenizer_is_eog(const locks_tokenizer *t, int32_t id) {
    if (!t || id < 0) return false;
    if (id == t->ids.eos) return true;
    for (int32_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

/* ------------------------------------------------------------------------------ */
/* BPE                                                                              */
/* ------------------------------------------------------------------------------ */

/* A candidate merge of the symbols at pos and next[pos], valid while they still hold
 * the ids left and right. */
typedef struct {
    int32_t rank, pos, left, right, id;
} merge_cand;

typedef struct {
    int32_t *sym, *prev, *next; /* (cap,) the piece's symbols as a linked list */
    merge_cand *heap;           /* (3 cap,) min-heap by (rank, pos) */
    int32_t n_heap;
    size_t cap;
} bpe_work;

typedef struct {
    int32_t *ids;
    int64_t cap, n;
} id_sink;

static void sink_put(id_sink *o, int32_t id) {
    if (o->n < o->cap) o->ids[o->n] = id;
    o->n++;
}

static int cand_less(const merge_cand *a, const merge_cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(bpe_work *w, merge_cand c) {
    int32_t i = w->n_heap++;
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!cand_less(&c, &w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = c;
}

static merge_cand heap_pop(bpe_work *w) {
    merge_cand top = w->heap[0], last = w->heap[--w->n_heap];
    int32_t i = 0, n = w->n_heap;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!cand_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0) w->heap[i] = last;
    return top;
}

static void push_pair(const locks_tokenizer *t, bpe_work *w, int32_t pos) {
    int32_t nx = w->next[pos];
    if (nx < 0) return;
    const pair_slot *m = pair_get(t, w->sym[pos], w->sym[nx]);
    if (m) heap_push(w, (merge_cand){m->rank, pos, w->sym[pos], w->sym[nx], m->id});
}

static void work_free(bpe_work *w) {
    locks_free(w->sym);
    locks_free(w->prev);
    locks_free(w->next);
    locks_free(w->heap);
    *w = (bpe_work){0};
}

static locks_status work_reserve(bpe_work *w, size_t n) {
    if (n <= w->cap) return LOCKS_OK;
    work_free(w);
    size_t cap = n < 256 ? 256 : 2 * n;
    w->sym = locks_alloc(cap, sizeof *w->sym);
    w->prev = locks_alloc(cap, sizeof *w->prev);
    w->next = locks_alloc(cap, sizeof *w->next);
    w->heap = locks_alloc(3 * cap, sizeof *w->heap);
    if (!w->sym || !w->prev || !w->next || !w->heap) {
        work_free(w);
        return LOCKS_ERR_OOM;
    }
    w->cap = cap;
    return LOCKS_OK;
}

/* BPE-encodes one pre-tokenized piece s[0, n) and appends its ids to out. */
static locks_status bpe_piece(const locks_tokenizer *t, const uint8_t *s, size_t n, bpe_work *w,
                              id_sink *out) {
    locks_status st = work_reserve(w, n);
    if (st != LOCKS_OK) return st;
    /* A byte with no token is dropped, as Hugging Face tokenizers and llama.cpp do. */
    int32_t m = 0;
    for (size_t k = 0; k < n; k++) {
        int32_t id = t->byte_id[s[k]];
        if (id < 0) continue;
        w->sym[m] = id;
        w->prev[m] = m - 1;
        w->next[m] = m + 1;
        m++;
    }
    if (m == 0) return LOCKS_OK;
    w->next[m - 1] = -1;
    w->n_heap = 0;
    for (int32_t k = 0; k + 1 < m; k++) push_pair(t, w, k);
    while (w->n_heap > 0) {
        merge_cand c = heap_pop(w);
        int32_t r = w->next[c.pos];
        if (w->sym[c.pos] != c.left || r < 0 || w->sym[r] != c.right) continue; /* stale */
        /* (pos, r) -> pos: the merged symbol keeps the left position. */
        w->sym[c.pos] = c.id;
        w->sym[r] = -1;
        w->next[c.pos] = w->next[r];
        if (w->next[r] >= 0) w->prev[w->next[r]] = c.pos;
        if (w->prev[c.pos] >= 0) push_pair(t, w, w->prev[c.pos]);
        push_pair(t, w, c.pos);
    }
    for (int32_t k = 0; k >= 0; k = w->next[k]) sink_put(out, w->sym[k]);
    return LOCKS_OK;
}


/* ------------------------------------------------------------------------------ */
/* SentencePiece BPE                                                                */
/* ------------------------------------------------------------------------------ */

/* SentencePiece-style BPE of one span s[0, n) (no pre-tokenizer): the symbols start as
 * the UTF-8 characters; the adjacent pair whose concatenation is a token with the highest
 * score is merged first (leftmost on ties), until no pair is a token. A final symbol
 * that is no token (a character outside the vocabulary) falls back to its bytes'
 * <0xAB> tokens; a byte without one is dropped. In the work arrays, sym[k] is the byte
 * offset of symbol k and prev/next link the live symbols; heap entries carry the
 * score (negated, as a rank: the heap pops the smallest) and the two lengths, which
 * tell a stale entry from a live one. */
typedef struct {
    float neg_score;
    int32_t pos, len_l, len_r, id;
} spm_cand;

static int spm_less(const spm_cand *a, const spm_cand *b) {
    return a->neg_score < b->neg_score || (a->neg_score == b->neg_score && a->pos < b->pos);
}

static int32_t spm_len(const bpe_work *w, int32_t k, size_t n) {
    return (w->next[k] >= 0 ? w->sym[w->next[k]] : (int32_t)n) - w->sym[k];
}

static void spm_push(const locks_tokenizer *t, bpe_work *w, spm_cand *heap, const uint8_t *s, size_t n, int32_t k) {
    int32_t r = w->next[k];
    if (k < 0 || r < 0) return;
    int32_t ll = spm_len(w, k, n), lr = spm_len(w, r, n);
    int32_t id = strmap_get(&t->by_text, (const char *)s + w->sym[k], (size_t)(ll + lr));
    if (id < 0) return;
    spm_cand c = {-t->score[id], k, ll, lr, id};
    int32_t i = w->n_heap++;
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!spm_less(&c, &heap[p])) break;
        heap[i] = heap[p];
        i = p;
    }
    heap[i] = c;
}

static spm_cand spm_pop(bpe_work *w, spm_cand *heap) {
    spm_cand top = heap[0], last = heap[--w->n_heap];
    int32_t i = 0, n = w->n_heap;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && spm_less(&heap[c + 1], &heap[c])) c++;
        if (!spm_less(&heap[c], &last)) break;
        heap[i] = heap[c];
        i = c;
    }
    if (n > 0) heap[i] = last;
    return top;
}

static locks_status spm_merge(const locks_tokenizer *t, const uint8_t *s, size_t n, bpe_work *w, id_sink *out);

/* SentencePiece escapes spaces as U+2581 before merging, so a U+2581 in the text is a
 * space too (sentencepiece and llama.cpp give it the same ids): the span is copied with
 * each U+2581 (E2 96 81) turned into ' ', the spelling of the token texts here. */
static locks_status spm_piece(const locks_tokenizer *t, const uint8_t *s, size_t n, bpe_work *w, id_sink *out) {
    if (n == 0) return LOCKS_OK;
    int has = 0;
    for (size_t k = 0; k + 2 < n && !has; k++) has = s[k] == 0xE2 && s[k + 1] == 0x96 && s[k + 2] == 0x81;
    if (!has) return spm_merge(t, s, n, w, out);
    uint8_t *c = locks_alloc(n, 1);
    if (!c) return LOCKS_ERR_OOM;
    size_t m = 0;
    for (size_t k = 0; k < n;) {
        if (k + 2 < n && s[k] == 0xE2 && s[k + 1] == 0x96 && s[k + 2] == 0x81) {
            c[m++] = ' ';
            k += 3;
        } else {
            c[m++] = s[k++];
        }
    }
    locks_status st = spm_merge(t, c, m, w, out);
    locks_free(c);
    return st;
}

static locks_status spm_merge(const locks_tokenizer *t, const uint8_t *s, size_t n, bpe_work *w, id_sink *out) {
    if (n == 0) return LOCKS_OK;
    /* merge_cand and spm_cand are both five 4-byte fields: the heap array serves both */
    _Static_assert(sizeof(spm_cand) == sizeof(merge_cand), "spm_cand must fit the BPE heap");
    locks_status st = work_reserve(w, n);
    if (st != LOCKS_OK) return st;
    spm_cand *heap = (spm_cand *)(void *)w->heap;
    int32_t m = 0;
    for (size_t k = 0; k < n; m++) {
        uint32_t cp;
        size_t l = utf8_next(s, n, k, &cp);
        w->sym[m] = (int32_t)k;
        w->prev[m] = m - 1;
        w->next[m] = m + 1;
        k += l;
    }
    w->next[m - 1] = -1;
    w->n_heap = 0;
    for (int32_t k = 0; k + 1 < m; k++) spm_push(t, w, heap, s, n, k);
    while (w->n_heap > 0) {
        spm_cand c = spm_pop(w, heap);
        int32_t r = w->next[c.pos];
        if (w->sym[c.pos] < 0 || r < 0 || spm_len(w, c.pos, n) != c.len_l || spm_len(w, r, n) != c.len_r)
            continue; /* stale: one side was merged since */
        w->sym[r] = -1;
        w->next[c.pos] = w->next[r];
        if (w->next[r] >= 0) w->prev[w->next[r]] = c.pos;
        spm_push(t, w, heap, s, n, w->prev[c.pos]);
        spm_push(t, w, heap, s, n, c.pos);
    }
    for (int32_t k = 0; k >= 0; k = w->next[k]) {
        int32_t len = spm_len(w, k, n);
        int32_t id = strmap_get(&t->by_text, (const char *)s + w->sym[k], (size_t)len);
        if (id >= 0) {
            sink_put(out, id);
            continue;
        }
        for (int32_t b = 0; b < len; b++) {
            int32_t bid = t->byte_id[s[w->sym[k] + b]];
            if (bid >= 0) sink_put(out, bid);
        }
    }
    return LOCKS_OK;
}

/* ------------------------------------------------------------------------------ */
/* Pre-tokenizer                                                                    */
/* ------------------------------------------------------------------------------ */

static cp_class class_at(const uint8_t *s, size_t e, size_t i, size_t *len) {
    uint32_t cp;
    *len = utf8_next(s, e, i, &cp);
    return cp_classify(cp);
}

/* End of the run of class cls starting at i (the code point at i is of class cls). */
static size_t run_end(const uint8_t *s, size_t e, size_t i, cp_class cls) {
    while (i < e) {
        size_t l;
        if (class_at(s, e, i, &l) != cls) break;
        i += l;
    }
    return i;
}

/* GPT-2's regex over s[b, e), tried at each position in this order:
 *   's|'t|'re|'ve|'m|'ll|'d        contractions (case-sensitive, ASCII)
 *    ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+   an optional ' ' and a run of one class
 *   \s+(?!\S)                      white space not followed by a non-space: a run that
 *                                  reaches the end, or all but its last code point
 *   \s+                            (a single white space before a non-space)
 * Each piece goes to BPE. */
static locks_status split_gpt2(const locks_tokenizer *t, const uint8_t *s, size_t b, size_t e,
                               bpe_work *w, id_sink *out) {
    size_t i = b;
    while (i < e) {
        size_t l, end;
        cp_class cls = class_at(s, e, i, &l);
        uint8_t c1 = i + 1 < e ? s[i + 1] : 0;
        if (s[i] == '\'' && (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')) {
            end = i + 2;
        } else if (s[i] == '\'' && i + 2 < e &&
                   ((c1 == 'r' && s[i + 2] == 'e') || (c1 == 'v' && s[i + 2] == 'e') ||
                    (c1 == 'l' && s[i + 2] == 'l'))) {
            end = i + 3;
        } else if (cls != CP_SPACE) {
            end = run_end(s, e, i, cls);
        } else {
            size_t l2;
            cp_class next = i + 1 < e ? class_at(s, e, i + 1, &l2) : CP_SPACE;
            if (s[i] == ' ' && next != CP_SPACE) {
                end = run_end(s, e, i + 1, next);
            } else {
                size_t j = i, last = i;
                while (j < e && class_at(s, e, j, &l2) == CP_SPACE) {
                    last = j;
                    j += l2;
                }
                end = (j < e && last > i) ? last : j;
            }
        }
        locks_status st = bpe_piece(t, s + i, end - i, w, out);
        if (st != LOCKS_OK) return st;
        i = end;
    }
    return LOCKS_OK;
}

/* One span of text with no special tokens in it. */
static locks_status encode_span(const locks_tokenizer *t, const uint8_t *s, size_t b, size_t e,
                                bpe_work *w, id_sink *out) {
    if (t->score) return spm_piece(t, s + b, e - b, w, out);
    if (t->pre == PRE_GPT2) return split_gpt2(t, s, b, e, w, out);
    /* PRE_GPT2_DIGITS: every \p{N} code point is a piece of its own; GPT-2's regex runs
     * on the spans between them. */
    size_t i = b;
    while (i < e) {
        size_t j = i, l = 0;
        while (j < e && class_at(s, e, j, &l) != CP_NUMBER) j += l;
        locks_status st = split_gpt2(t, s, i, j, w, out);
        if (st == LOCKS_OK && j < e) st = bpe_piece(t, s + j, l, w, out);
        if (st != LOCKS_OK) return st;
        i = j < e ? j + l : j;
    }
    return LOCKS_OK;
}

/* ------------------------------------------------------------------------------ */
/* Encode                                                                           */
/* ------------------------------------------------------------------------------ */

/* The special token that starts at s[i], or -1. */
static int32_t match_special(const locks_tokenizer *t, const uint8_t *s, size_t n, size_t i,
                             bool parse_special) {
    if (!(t->special_first[s[i] >> 3] & (1u << (s[i] & 7)))) return -1;
    for (int32_t k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        if (!parse_special && t->type[id] == LOCKS_TOKEN_CONTROL) continue;
        size_t len = t->off[id + 1] - t->off[id];
        if (len <= n - i && memcmp(s + i, t->raw + t->off[id], len) == 0) return id;
    }
    return -1;
}

locks_status locks_tokenizer_encode(const locks_tokenizer *t, const char *text, size_t len,
                                    bool parse_special, int32_t *ids, int32_t cap,
                                    int32_t *n_out) {
    if (!t || !n_out || (!text && len > 0) || cap < 0 || (!ids && cap > 0) || len > INT32_MAX)
        return LOCKS_ERR_INVALID_ARG;
    const uint8_t *s = (const uint8_t *)text;
    id_sink out = {ids, cap, 0};
    bpe_work w = {0};
    locks_status st = LOCKS_OK;
    size_t span = 0;
    for (size_t i = 0; i < len && st == LOCKS_OK;) {
        int32_t sp = match_special(t, s, len, i, parse_special);
        if (sp < 0) {
            i++;
            continue;
        }
        st = encode_span(t, s, span, i, &w, &out);
        sink_put(&out, sp);
        i += t->off[sp + 1] - t->off[sp];
        span = i;
    }
    if (st == LOCKS_OK) st = encode_span(t, s, span, len, &w, &out);
    work_free(&w);
    if (st != LOCKS_OK) return st;
    *n_out = (int32_t)out.n;
    return out.n > cap ? LOCKS_ERR_INVALID_ARG : LOCKS_OK;
}

/* ------------------------------------------------------------------------------ */
/* Decode                                                                           */
/* ------------------------------------------------------------------------------ */

locks_status locks_tokenizer_piece(const locks_tokenizer *t, int32_t id, bool special,
                                   const char **bytes, size_t *len) {
    if (!t || !bytes || !len || id < 0 || id >= t->n_vocab) return LOCKS_ERR_INVALID_ARG;
    uint8_t ty = t->type[id];
    int hidden = ty == LOCKS_TOKEN_CONTROL || ty == LOCKS_TOKEN_UNKNOWN || ty == LOCKS_TOKEN_UNUSED;
    *bytes = t->raw + t->off[id];
    *len = (hidden && !special) ? 0 : t->off[id + 1] - t->off[id];
    return LOCKS_OK;
}

locks_status locks_tokenizer_decode(const locks_tokenizer *t, const int32_t *ids, int32_t n,
                                    bool special, char *out, size_t cap, size_t *n_out) {
    if (!t || !n_out || n < 0 || (!ids && n > 0) || (!out && cap > 0)) return LOCKS_ERR_INVALID_ARG;
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *p;
        size_t l;
        if (locks_tokenizer_piece(t, ids[i], special, &p, &l) != LOCKS_OK) return LOCKS_ERR_INVALID_ARG;
        if (total + l < cap) memcpy(out + total, p, l);
        total += l;
    }
    *n_out = total;
    if (total + 1 > cap) return LOCKS_ERR_INVALID_ARG;
    out[total] = '\0';
    return LOCKS_OK;
}

/* Length of the unfinished UTF-8 character at the end of s[0, n): 0 if s ends on a
 * character boundary or with bytes that cannot become a character. */
static size_t utf8_incomplete_tail(const uint8_t *s, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        uint8_t b = s[n - back];
        if ((b & 0xC0) == 0x80) continue; /* continuation byte: look further back */
        size_t need = (b >= 0xC2 && b <= 0xDF) ? 2 : (b >= 0xE0 && b <= 0xEF) ? 3 : (b >= 0xF0 && b <= 0xF4) ? 4 : 0;
        if (need <= back) return 0;
        if (back >= 2) { /* the second byte must fit the lead's range */
            uint8_t c = s[n - back + 1];
            if ((b == 0xE0 && c < 0xA0) || (b == 0xED && c > 0x9F) || (b == 0xF0 && c < 0x90) ||
                (b == 0xF4 && c > 0x8F))
                return 0;
        }
        return back;
    }
    return 0;
}

locks_status locks_tokenizer_decode_stream(const locks_tokenizer *t, locks_detok_state *st,
                                           int32_t id, bool special, char *out, size_t cap,
                                           size_t *n_out) {
    const char *p;
    size_t l;
    if (!st || !out || !n_out || st->n_pending < 0 || st->n_pending > 3) return LOCKS_ERR_INVALID_ARG;
    if (locks_tokenizer_piece(t, id, special, &p, &l) != LOCKS_OK) return LOCKS_ERR_INVALID_ARG;
    size_t total = (size_t)st->n_pending + l;
    if (cap < total) return LOCKS_ERR_INVALID_ARG;
    memcpy(out, st->pending, (size_t)st->n_pending);
    memcpy(out + st->n_pending, p, l);
    size_t hold = utf8_incomplete_tail((const uint8_t *)out, total);
    memcpy(st->pending, out + total - hold, hold);
    st->n_pending = (int32_t)hold;
    *n_out = total - hold;
    return LOCKS_OK;
}

size_t locks_detok_flush(locks_detok_state *st, char out[4]) {
    if (!st || st->n_pending <= 0 || st->n_pending > 3) {
        if (st) st->n_pending = 0;
        return 0;
    }
    size_t n = (size_t)st->n_pending;
    memcpy(out, st->pending, n);
    st->n_pending = 0;
    return n;
}

/* ------------------------------------------------------------------------------ */
/* ChatML                                                                           */
/* ------------------------------------------------------------------------------ */

typedef struct {
    char *out;
    size_t cap, n;
} text_sink;

static void text_put(text_sink *o, const char *s) {
    size_t l = strlen(s);
    if (o->n + l < o->cap) memcpy(o->out + o->n, s, l);
    o->n += l;
}

locks_status locks_chatml_format(const locks_chat_msg *msgs, int32_t n_msgs, bool add_assistant,
                                 char *out, size_t cap, size_t *n_out) {
    if (!n_out || n_msgs < 0 || (!msgs && n_msgs > 0) || (!out && cap > 0)) return LOCKS_ERR_INVALID_ARG;
    text_sink o = {out, cap, 0};
    for (int32_t i = 0; i < n_msgs; i++) {
        if (!msgs[i].role || !msgs[i].content) return LOCKS_ERR_INVALID_ARG;
        text_put(&o, "<|im_start|>");
        text_put(&o, msgs[i].role);
        text_put(&o, "\n");
        text_put(&o, msgs[i].content);
        text_put(&o, "<|im_end|>\n");
    }
    if (add_assistant) text_put(&o, "<|im_start|>assistant\n");
    *n_out = o.n;
    if (o.n + 1 > cap) return LOCKS_ERR_INVALID_ARG;
    out[o.n] = '\0';
    return LOCKS_OK;
}

/* Appends s[0, n) with leading and trailing white space removed (Jinja's trim). */
static void text_put_trim(text_sink *o, const char *s) {
    size_t n = strlen(s), b = 0;
    while (b < n && (s[b] == ' ' || s[b] == '\t' || s[b] == '\n' || s[b] == '\r')) b++;
    while (n > b && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r')) n--;
    for (size_t i = b; i < n; i++) {
        if (o->n + 1 < o->cap) o->out[o->n] = s[i];
        o->n++;
    }
}

locks_status locks_gemma_chat_format(const locks_chat_msg *msgs, int32_t n_msgs, bool add_assistant,
                                     char *out, size_t cap, size_t *n_out) {
    if (!n_out || n_msgs < 0 || (!msgs && n_msgs > 0) || (!out && cap > 0)) return LOCKS_ERR_INVALID_ARG;
    for (int32_t i = 0; i < n_msgs; i++)
        if (!msgs[i].role || !msgs[i].content) return LOCKS_ERR_INVALID_ARG;
    text_sink o = {out, cap, 0};
    text_put(&o, "<bos>");
    int32_t first = 0;
    const char *system = NULL;
    if (n_msgs > 0 && strcmp(msgs[0].role, "system") == 0) {
        system = msgs[0].content;
        first = 1;
    }
    for (int32_t i = first; i < n_msgs; i++) {
        text_put(&o, "<start_of_turn>");
        text_put(&o, strcmp(msgs[i].role, "assistant") == 0 ? "model" : msgs[i].role);
        text_put(&o, "\n");
        if (i == first && system) { /* Gemma has no system turn: it opens the first one */
            text_put_trim(&o, system);
            text_put(&o, "\n\n");
        }
        text_put_trim(&o, msgs[i].content);
        text_put(&o, "<end_of_turn>\n");
    }
    if (add_assistant) text_put(&o, "<start_of_turn>model\n");
    *n_out = o.n;
    if (o.n + 1 > cap) return LOCKS_ERR_INVALID_ARG;
    out[o.n] = '\0';
    return LOCKS_OK;
}
