/*
 * unicode_tables.h — the Unicode classes the byte-level BPE pre-tokenizer needs.
 *
 * Letters (\p{L}) and numbers (\p{N}) are looked up in generated range tables
 * (unicode_tables.c, from scripts/gen_unicode_tables.py, Unicode 16.0.0); white space
 * (\s) is the Unicode White_Space property, written out in unicode_class.c. Together
 * they classify every code point as Hugging Face tokenizers' regex engine does
 * (checked code point by code point in tests/test_tokenizer.c against
 * tests/data/hf_unicode_classes.h). Internal to locks_model.
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

typedef enum { LOCKS_UC_LETTER = 0, LOCKS_UC_NUMBER, LOCKS_UC_SPACE, LOCKS_UC_OTHER } locks_unicode_cls;

/* Class of a code point (anything above U+10FFFF or a surrogate is OTHER). */
locks_unicode_cls locks_unicode_class(uint32_t cp);

#endif
