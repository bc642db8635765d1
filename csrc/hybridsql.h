/*
** The kernels of hybridsql.c that Python calls through cffi (hybridsql/_native.py). They know
** nothing of SQLite. Only declarations reach the cffi cdef; lines starting with '#' do not.
*/
#ifndef HYBRIDSQL_H
#define HYBRIDSQL_H
#include <stdint.h>

const char *hs_simd_path(void);
int64_t hs_first_nonfinite(const float *v, int64_t d);
double hs_cosine(const float *a, const float *b, int64_t d);

#endif
