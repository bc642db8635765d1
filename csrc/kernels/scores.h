/*
** The kernels of kernels/scores.c, for functions/scalar.c.  Nothing here knows SQLite.
*/
#ifndef HYBRIDSQL_KERNELS_SCORES_H
#define HYBRIDSQL_KERNELS_SCORES_H
#include "common.h"

/* Requirement 6: an FTS5 bm25() rank mapped to [0, 1]. */
double hs_bm25_score(double rank, double saturation);
/* Requirement 8: the decay after age_days, 1.0 at age 0 or less. */
double hs_decay(double age_days, double half_life_days);
/* Whether the file name of path (n bytes) is YYYY-MM-DD.md with a real date: its days since the
** epoch into *days. */
int hs_path_date(const char *path, int64_t n, int64_t *days);
/* Requirement 8's `now` as ISO-8601 text (n bytes) into unix seconds; 0 when it is not. */
int hs_parse_time(const char *s, int64_t n, double *unix_seconds);

#endif
