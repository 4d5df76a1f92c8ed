/*
 * unicode_tables.h — the Unicode classes the byte-level BPE pre-tokenizer needs.
 *
 * Letters (\p{L}) and numbers (\p{N}) are looked up in generated range tables
 * (unicode_tables.c, from scripts/gen_unicode_tables.py); white space (\s) is the
 * Unicode White_Space property, small enough to write out in the tokenizer.
 * Internal to locks_model.
 */
#ifndef LOCKS_UNICODE_TABLES_H
#define LOCKS_UNICODE_TABLES_H

#include <stdint.h>

typedef struct {
    uint32_t lo, hi; /* inclusive */
} locks_cp_range;

extern const locks_cp_range locks_unicode_letters[];
extern const int32_t locks_unicode_letters_count;
extern const locks_cp_range locks_unicode_numbers[];
extern const int32_t locks_unicode_numbers_count;

#endif
