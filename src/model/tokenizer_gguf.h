/*
 * tokenizer_gguf.h — builds a locks_tokenizer from a GGUF file's tokenizer.ggml.* keys.
 * Internal to locks_model (the gguf type is not public): the model loader and the
 * tests use it.
 */
#ifndef LOCKS_TOKENIZER_GGUF_H
#define LOCKS_TOKENIZER_GGUF_H

#include "gguf.h"
#include "locks_model.h"

/* Reads tokenizer.ggml.model (must be "gpt2"), .tokens, .token_type (optional), .merges
 * (optional), .pre (optional; absent = "gpt2") and the bos/eos/unknown/padding ids
 * (optional; an id outside the vocabulary is ignored with a warning).
 * Returns NULL and sets *err: LOCKS_ERR_FORMAT (missing tokens, wrong types or lengths,
 * a token holding a NUL byte), LOCKS_ERR_UNSUPPORTED (another tokenizer model or an
 * unknown pre-tokenizer), LOCKS_ERR_OOM. */
locks_tokenizer *locks_tokenizer_from_gguf(const gguf *g, locks_status *err);

#endif
