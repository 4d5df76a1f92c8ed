/*
 * locks_model.h — the small inference engine: GGUF reader, Llama-family forward pass,
 * tokenizer, sampler. Built as the separate library locks_model on top of locks.
 */
#ifndef LOCKS_MODEL_H
#define LOCKS_MODEL_H

#include "locks.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ================================================================================ */
/* Tokenizer                                                                         */
/* ================================================================================ */
/*
 * GPT-2-style byte-level BPE, built from a vocabulary as a GGUF stores it:
 *
 *   tokenizer.ggml.tokens      string[n]   token text; NORMAL tokens are in GPT-2's
 *                                          byte-to-unicode alphabet ("Ġthe" = " the"),
 *                                          CONTROL / USER_DEFINED tokens are plain UTF-8
 *   tokenizer.ggml.token_type  int32[n]    locks_token_type
 *   tokenizer.ggml.merges      string[m]   "left right" in rank order (first = merged first)
 *   tokenizer.ggml.pre         string      pre-tokenizer name (see below)
 *   tokenizer.ggml.{bos,eos,unknown,padding}_token_id
 *
 * Encoding: text is first cut at special tokens (CONTROL tokens when parse_special is
 * set, USER_DEFINED tokens always; longest match wins), each remaining span is split by
 * the pre-tokenizer, and each piece is BPE-merged from its bytes by merge rank (lowest
 * rank first, leftmost first on ties), as Hugging Face `tokenizers` does.
 *
 * Pre-tokenizers ("pre"):
 *   "gpt2"                      GPT-2's regex
 *                               's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   "smollm", "starcoder",      every \p{N} code point is its own piece first, then the
 *   "refact", "codeshell"       GPT-2 regex on the spans between them
 * \p{L}, \p{N} follow Unicode 14 general categories, \s the White_Space property. Bytes
 * that are not valid UTF-8 count as "other" (neither letter, number nor space), so any
 * byte string encodes and decodes back to itself.
 *
 * Decoding is byte-exact: a token's piece is its raw bytes, which may be a fragment of a
 * UTF-8 character; locks_tokenizer_decode_stream holds such fragments back.
 */

typedef struct locks_tokenizer locks_tokenizer;

/* Token types, numbered as GGUF (llama.cpp) stores them. */
typedef enum {
    LOCKS_TOKEN_UNDEFINED = 0,
    LOCKS_TOKEN_NORMAL = 1,
    LOCKS_TOKEN_UNKNOWN = 2,
    LOCKS_TOKEN_CONTROL = 3,      /* <|im_start|>, <|endoftext|>, ... */
    LOCKS_TOKEN_USER_DEFINED = 4, /* added text token: always matched literally */
    LOCKS_TOKEN_UNUSED = 5,
    LOCKS_TOKEN_BYTE = 6, /* "<0xAB>": the single byte 0xAB */
} locks_token_type;

/* Special token ids; -1 = the vocabulary has none. */
typedef struct {
    int32_t bos, eos, unk, pad;
} locks_token_ids;

/* Builds a tokenizer. tokens[n_tokens] (UTF-8, NUL-terminated), types[n_tokens]
 * (locks_token_type; NULL = all NORMAL), merges[n_merges] ("a b"; a merge whose parts or
 * result are not in the vocabulary is skipped with a warning), pre = pre-tokenizer name
 * (NULL = "gpt2"). The tokenizer copies what it needs; the arrays may be freed after.
 * Special ids start as all -1 (set them with locks_tokenizer_set_special).
 * Returns NULL and sets *err (if err is non-NULL): LOCKS_ERR_INVALID_ARG for NULL arrays,
 * n_tokens <= 0 or a type out of range, LOCKS_ERR_UNSUPPORTED for an unknown pre name,
 * LOCKS_ERR_OOM. */
locks_tokenizer *locks_tokenizer_init(const char *const *tokens, const int32_t *types,
                                      int32_t n_tokens, const char *const *merges,
                                      int32_t n_merges, const char *pre, locks_status *err);
void locks_tokenizer_free(locks_tokenizer *t);

int32_t locks_tokenizer_n_vocab(const locks_tokenizer *t);
/* LOCKS_ERR_INVALID_ARG if an id is neither -1 nor in [0, n_vocab); nothing changes then. */
locks_status locks_tokenizer_set_special(locks_tokenizer *t, locks_token_ids ids);
locks_token_ids locks_tokenizer_special(const locks_tokenizer *t);
/* Type of token id; LOCKS_TOKEN_UNDEFINED for an id out of range. */
locks_token_type locks_tokenizer_type(const locks_tokenizer *t, int32_t id);
/* Id of the token whose decoded bytes are exactly text[0, len) (CONTROL and USER_DEFINED
 * tokens first, then the lowest id), or -1. E.g. locks_tokenizer_find(t, "<|im_end|>", 10). */
int32_t locks_tokenizer_find(const locks_tokenizer *t, const char *text, size_t len);
/* True for ids that end a generation: eos, and the CONTROL tokens <|im_end|>,
 * <|endoftext|>, <|eot_id|>, <|end|> where the vocabulary has them. */
bool locks_tokenizer_is_eog(const locks_tokenizer *t, int32_t id);

/* Encodes text[0, len) (any bytes; no BOS is added). Writes up to cap ids to ids and the
 * total count to *n_out. At most len ids are ever produced, so cap >= len always fits.
 * Returns LOCKS_ERR_INVALID_ARG with *n_out = the count needed if cap is too small
 * (call again with a bigger buffer), LOCKS_ERR_UNSUPPORTED if a byte has no token and
 * there is no unk id, LOCKS_ERR_OOM. */
locks_status locks_tokenizer_encode(const locks_tokenizer *t, const char *text, size_t len,
                                    bool parse_special, int32_t *ids, int32_t cap,
                                    int32_t *n_out);

/* The raw bytes of token id (not NUL-terminated; valid while t lives). CONTROL, UNKNOWN
 * and UNUSED tokens give their text only when special is true, else zero bytes.
 * LOCKS_ERR_INVALID_ARG for an id out of range. */
locks_status locks_tokenizer_piece(const locks_tokenizer *t, int32_t id, bool special,
                                   const char **bytes, size_t *len);

/* Concatenated pieces of ids[0, n), NUL-terminated. *n_out = length without the NUL;
 * LOCKS_ERR_INVALID_ARG (with *n_out set) if cap < *n_out + 1 or an id is out of range. */
locks_status locks_tokenizer_decode(const locks_tokenizer *t, const int32_t *ids, int32_t n,
                                    bool special, char *out, size_t cap, size_t *n_out);

/* Streaming detokenization: zero-initialise one per output stream. */
typedef struct {
    char pending[4]; /* trailing bytes of an unfinished UTF-8 character */
    int32_t n_pending;
} locks_detok_state;

/* Appends the piece of id to what st holds back and writes to out everything except a
 * trailing, still-incomplete UTF-8 character, which st keeps for the next call. Bytes that
 * can never become valid UTF-8 are passed through. out needs cap >= piece length + 4;
 * *n_out = bytes written (no NUL). LOCKS_ERR_INVALID_ARG for a bad id or small cap
 * (st unchanged). */
locks_status locks_tokenizer_decode_stream(const locks_tokenizer *t, locks_detok_state *st,
                                           int32_t id, bool special, char *out, size_t cap,
                                           size_t *n_out);
/* Writes whatever st still holds (at most 3 bytes; an unfinished character at the end
 * of the stream) and resets it. */
size_t locks_detok_flush(locks_detok_state *st, char out[4]);

/* One chat message; role is "system", "user" or "assistant" (any text is accepted). */
typedef struct {
    const char *role;
    const char *content;
} locks_chat_msg;

/* SmolLM2's chat template inserts this system message when the first message is not a
 * system message; pass it yourself to get the same prompt. */
#define LOCKS_SMOLLM2_SYSTEM_PROMPT \
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

/* ChatML: for each message "<|im_start|>{role}\n{content}<|im_end|>\n", then, if
 * add_assistant, "<|im_start|>assistant\n". Writes the NUL-terminated text to out;
 * *n_out = its length. LOCKS_ERR_INVALID_ARG (with *n_out set) if cap < *n_out + 1 or a
 * role/content is NULL. Encode the result with parse_special = true. */
locks_status locks_chatml_format(const locks_chat_msg *msgs, int32_t n_msgs, bool add_assistant,
                                 char *out, size_t cap, size_t *n_out);

/* ================================================================================ */
/* end Tokenizer                                                                     */
/* ================================================================================ */

#ifdef __cplusplus
}
#endif

#endif
