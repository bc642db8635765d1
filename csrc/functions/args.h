/*
** The SQL values of functions/args.c: reading a vector or number argument, and reporting an
** error (Requirement 3).  For the SQL functions (functions/), vector_index and bm25_candidate.
*/
#ifndef HYBRIDSQL_FUNCTIONS_ARGS_H
#define HYBRIDSQL_FUNCTIONS_ARGS_H
#include "common.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

/* A vector argument: v points at D floats, in SQLite's memory or in owned. */
typedef struct Vec {
  const float *v;
  int64_t d;
  float *owned;
} Vec;

/* Frees what x owns (inline: cosine_topk calls it for every row). */
static inline void vec_free(Vec *x) {
  sqlite3_free(x->owned);
  x->owned = 0;
}

/* The message parse_vector() returns when out of memory; never freed. */
extern char NOMEM[];

/*
** Reads a vector value (Requirement 1).  Returns NULL with *out set (out->v is NULL for an SQL
** NULL), or an error message from sqlite3_mprintf (or NOMEM) for the caller to report, which
** starts with `fn` and names the value by `what` (args.c).
*/
char *parse_vector(sqlite3_value *arg, const char *fn, const char *what, Vec *out);
/* parse_vector() for a function argument: 1 with *out set, 0 for NULL, -1 after an error. */
int read_vector(sqlite3_context *ctx, sqlite3_value *arg, const char *fn,
                const char *what, Vec *out);
/* Reads a number argument; 0 after reporting an error.  NULL and infinities are errors. */
int read_number(sqlite3_context *ctx, sqlite3_value *arg, const char *fn, int pos,
                const char *name, double *out);

/* "1st" to "5th" for argument i (from 0); a value's type as error texts name it. */
const char *ordinal(int i);
const char *type_name(sqlite3_value *v);

/* A number for an error message: C's %g, which Python's '%g' matches. */
typedef struct Num {
  char s[32];
} Num;
Num num(double x);

/* Reports an error built with sqlite3_vmprintf (Requirement 3). */
void fail(sqlite3_context *ctx, const char *fmt, ...);

#endif
