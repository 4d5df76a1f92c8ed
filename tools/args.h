/* args.h — number parsing shared by the `locks` subcommands' option parsers. */
#ifndef LOCKS_ARGS_H
#define LOCKS_ARGS_H

#include <stdint.h>

/* A comma-separated list of integers in [lo, hi], each with an optional binary suffix
 * k/K (x 1024) or m/M (x 1048576): "32768,128k,1M". Writes the values to out[max] and
 * returns how many; 0 if the list is malformed (empty, an empty or non-numeric item, a
 * value out of range, more than max items). A trailing comma is allowed. */
int args_parse_ints(const char *s, int32_t *out, int max, int32_t lo, int32_t hi);

/* One such integer (no comma): 1 and *out set, or 0 if malformed or out of range. */
int args_parse_int(const char *s, int32_t lo, int32_t hi, int32_t *out);

#endif
