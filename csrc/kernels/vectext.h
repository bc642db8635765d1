/*
** The kernels of kernels/vectext.c, for the SQL functions and vector_index.  Nothing here knows
** SQLite.
*/
#ifndef HYBRIDSQL_KERNELS_VECTEXT_H
#define HYBRIDSQL_KERNELS_VECTEXT_H
#include "common.h"

/* Status codes of hs_parse_json_vector(). */
#define HS_OK 0
#define HS_MALFORMED 1
#define HS_EMPTY 2
#define HS_NONFINITE 3
#define HS_TOO_LONG 4

/* Reads the JSON array of numbers at s (n bytes) into out (at most cap floats): HS_OK with
** *dims set, else the status, with *bad_index the first value that is not finite. */
int hs_parse_json_vector(const char *s, int64_t n, float *out, int64_t cap, int64_t *dims,
                         int64_t *bad_index);
/* x with the fewest digits (6 to 9) that read back as the same float32; the length. */
int hs_format_float(float x, char *buf, int64_t cap);
/* snprintf(buf, cap, "%.*g", precision, x) with a '.' decimal point; returns the length. */
int c_format(char *buf, size_t cap, int precision, double x);

static inline int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

#endif
