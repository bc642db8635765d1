/*
** What every file of the library shares, and nothing else: the lowest layer, which includes no
** header of csrc/.  HS_EXPORT marks what the library exports (hybridsql.h lists it); the limits
** are those the SQL functions, vector_index and their error texts name.
*/
#ifndef HYBRIDSQL_COMMON_H
#define HYBRIDSQL_COMMON_H
#include <stddef.h>
#include <stdint.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "hybridsql stores vectors as little-endian float32 and supports little-endian hosts only"
#endif

/* What the library exports; every build hides the rest (-fvisibility=hidden). */
#if defined(_WIN32)
#define HS_EXPORT __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#define HS_EXPORT __attribute__((visibility("default")))
#else
#define HS_EXPORT
#endif

#define HS_MAX_DIMS 65536 /* a vector's dimensions (Requirement 1) */
#define HS_MAX_K 10000    /* cosine_topk's k, vector_index's k, bm25_candidate's n */

#endif
