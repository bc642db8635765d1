/*
** The kernels of hybridsql.c that Python calls through cffi. They know
** nothing of SQLite. Only the #define HS_ lines of the preprocessor reach the cffi cdef.
*/
#ifndef HYBRIDSQL_H
#define HYBRIDSQL_H
#include <stdint.h>

/* Status codes of hs_parse_json_vector(). */
#define HS_OK 0
#define HS_MALFORMED 1
#define HS_EMPTY 2
#define HS_NONFINITE 3
#define HS_TOO_LONG 4

const char *hs_version(void);
const char *hs_simd_path(void);

int hs_parse_json_vector(const char *text, int64_t n, float *out, int64_t cap,
                         int64_t *dims, int64_t *bad_index);
int64_t hs_first_nonfinite(const float *v, int64_t d);
double hs_cosine(const float *a, const float *b, int64_t d);
void hs_cosine_many(const float *q, const float *m, int64_t n, int64_t d, double *out);
int64_t hs_topk(const float *q, const float *m, const int64_t *ids, int64_t n, int64_t d,
                int64_t k, int64_t *out_ids, double *out_scores);
double hs_bm25_score(double rank, double saturation);
int hs_path_date(const char *path, int64_t n, int64_t *days);
int hs_parse_time(const char *text, int64_t n, double *unix_seconds);
double hs_decay(double age_days, double half_life_days);
int hs_format_float(float x, char *buf, int64_t cap);

#endif
