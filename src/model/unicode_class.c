/*
 * unicode_class.c — letter / number / white space / other, for the pre-tokenizer's
 * \p{L}, \p{N} and \s. See unicode_tables.h.
 */
#include "unicode_tables.h"

static int in_ranges(const locks_cp_range *r, int32_t n, uint32_t cp) {
    int32_t lo = 0, hi = n - 1;
    while (lo <= hi) {
        int32_t mid = (lo + hi) / 2;
        if (cp < r[mid].lo) hi = mid - 1;
        else if (cp > r[mid].hi) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* The Unicode White_Space property: stable and short enough to write out. */
static int is_space(uint32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x85) return 0;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

locks_unicode_cls locks_unicode_class(uint32_t cp) {
    if (cp < 0x80) { /* ASCII fast path */
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return LOCKS_UC_LETTER;
        if (cp >= '0' && cp <= '9') return LOCKS_UC_NUMBER;
        return is_space(cp) ? LOCKS_UC_SPACE : LOCKS_UC_OTHER;
    }
    if (is_space(cp)) return LOCKS_UC_SPACE;
    if (in_ranges(locks_unicode_letters, locks_unicode_letters_count, cp)) return LOCKS_UC_LETTER;
    if (in_ranges(locks_unicode_numbers, locks_unicode_numbers_count, cp)) return LOCKS_UC_NUMBER;
    return LOCKS_UC_OTHER;
}
