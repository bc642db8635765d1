/*
** What every SQL function and vector_index reads of SQLite's values, and how they fail: a vector
** argument (Requirement 1 of functions/scalar.c), a number argument, the types and ordinals
** error texts name, and the errors themselves (Requirement 3: the function, the argument by
** position and the numbers).  And SQLite's routines: a loadable extension reaches SQLite through
** one pointer, sqlite3_api, defined here (the lowest file that calls SQLite) and set by the
** entry point (hybridsql.c); every other file declares it (SQLITE_EXTENSION_INIT3).
*/
#include "functions/args.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "kernels/simd.h"
#include "kernels/vectext.h"

SQLITE_EXTENSION_INIT1

const char *ordinal(int i) {
  static const char *names[] = {"1st", "2nd", "3rd", "4th", "5th"};
  return names[i];
}

const char *type_name(sqlite3_value *v) {
  switch (sqlite3_value_type(v)) {
    case SQLITE_INTEGER: return "integer";
    case SQLITE_FLOAT: return "real";
    case SQLITE_TEXT: return "text";
    case SQLITE_BLOB: return "blob";
    default: return "NULL";
  }
}

/* A number for an error message: C's %g, which Python's '%g' matches. */
Num num(double x) {
  Num n;
  c_format(n.s, sizeof(n.s), 6, x);
  return n;
}

static void fail_with(sqlite3_context *ctx, char *msg);

/* Reports an error built with sqlite3_vmprintf (Requirement 3). */
void fail(sqlite3_context *ctx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *msg = sqlite3_vmprintf(fmt, ap);
  va_end(ap);
  fail_with(ctx, msg);
}

/* The message parse_vector() returns when out of memory; never freed. */
char NOMEM[] = "out of memory";

/*
** Reads a vector value (Requirement 1).  Returns NULL with *out set (out->v
** is NULL for an SQL NULL), or an error message from sqlite3_mprintf (or
** NOMEM) for the caller to report.  The message starts with `fn`, the name of
** what reads it ("cosine_topk()", or a vector_index table's name), and
** `what` names the value, e.g. "1st argument" or "4th argument of row 17".
*/
char *parse_vector(sqlite3_value *arg, const char *fn, const char *what, Vec *out) {
  out->v = 0;
  out->d = 0;
  out->owned = 0;
  int type = sqlite3_value_type(arg);
  if (type == SQLITE_NULL) return 0;
  if (type == SQLITE_BLOB) {
    const void *p = sqlite3_value_blob(arg);
    int64_t n = sqlite3_value_bytes(arg);
    if (n % 4 != 0) {
      return sqlite3_mprintf("%s: %s is a BLOB of %lld bytes, not a multiple of 4", fn, what, n);
    }
    if (n == 0) return sqlite3_mprintf("%s: %s is an empty vector", fn, what);
    if (n / 4 > HS_MAX_DIMS) {
      return sqlite3_mprintf("%s: %s has %lld dimensions, more than %d", fn, what, n / 4,
                             HS_MAX_DIMS);
    }
    out->v = p; /* possibly unaligned: every kernel reads it with loadf() or loadu */
    out->d = n / 4;
    int64_t bad = hs_first_nonfinite(out->v, out->d);
    if (bad >= 0) {
      vec_free(out);
      return sqlite3_mprintf("%s: %s has a non-finite value at index %lld", fn, what, bad);
    }
    return 0;
  }
  if (type == SQLITE_TEXT) {
    const char *s = (const char *)sqlite3_value_text(arg);
    int64_t n = sqlite3_value_bytes(arg), d = 0, bad = -1;
    int64_t cap = n / 2 + 1;
    if (cap > HS_MAX_DIMS) cap = HS_MAX_DIMS;
    out->owned = sqlite3_malloc64(sizeof(float) * (sqlite3_uint64)cap);
    if (!s || !out->owned) {
      vec_free(out);
      return NOMEM;
    }
    int rc = hs_parse_json_vector(s, n, out->owned, cap, &d, &bad);
    if (rc == HS_OK) {
      out->v = out->owned;
      out->d = d;
      return 0;
    }
    vec_free(out);
    if (rc == HS_EMPTY) return sqlite3_mprintf("%s: %s is an empty vector", fn, what);
    if (rc == HS_NONFINITE) {
      return sqlite3_mprintf("%s: %s has a non-finite value at index %lld", fn, what, bad);
    }
    if (rc == HS_TOO_LONG) {
      return sqlite3_mprintf("%s: %s has more than %d dimensions", fn, what, HS_MAX_DIMS);
    }
    return sqlite3_mprintf("%s: %s is not a JSON array of numbers", fn, what);
  }
  return sqlite3_mprintf("%s: %s must be a vector (float32 BLOB or JSON array text), got %s", fn,
                         what, type_name(arg));
}

/* Reports a message from parse_vector() on ctx and frees it. */
static void fail_with(sqlite3_context *ctx, char *msg) {
  if (!msg || msg == NOMEM) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  sqlite3_result_error(ctx, msg, -1);
  sqlite3_free(msg);
}

/* parse_vector() for a function argument: 1 with *out set, 0 for NULL, -1 after an error. */
int read_vector(sqlite3_context *ctx, sqlite3_value *arg, const char *fn,
                const char *what, Vec *out) {
  char *err = parse_vector(arg, fn, what, out);
  if (err) {
    fail_with(ctx, err);
    return -1;
  }
  return out->v ? 1 : 0;
}

/* Reads a number argument; 0 after reporting an error.  NULL and infinities are errors. */
int read_number(sqlite3_context *ctx, sqlite3_value *arg, const char *fn, int pos,
                const char *name, double *out) {
  int type = sqlite3_value_type(arg);
  if (type != SQLITE_INTEGER && type != SQLITE_FLOAT) {
    fail(ctx, "%s(): %s argument %s must be a number, got %s", fn, ordinal(pos), name,
         type_name(arg));
    return 0;
  }
  *out = sqlite3_value_double(arg);
  if (!isfinite(*out)) {
    fail(ctx, "%s(): %s argument %s must be a finite number, got %s", fn, ordinal(pos), name,
         num(*out).s);
    return 0;
  }
  return 1;
}
