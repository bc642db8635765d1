/*
** A libFuzzer harness for the argument parsing of every SQL function in
** csrc/functions/, of the virtual table module vector_index (csrc/vector_index/)
** and of the FTS5 function bm25_candidate, through SQLite itself.
**
** The library (every C file of csrc/) is compiled into the fuzzer with
** SQLITE_CORE, so its functions
** are registered on an in-memory database by calling sqlite3_hybridsql_init
** directly, against the system libsqlite3.  Each input picks one statement
** and the values bound to its parameters; cosine_topk() runs over a table of
** up to 16 generated rows; k-nearest queries run over a vector_index table
** `vectors` of up to 24 rows written by generated inserts, deletes and updates
** (rows move between partitions, and blocks grow and empty); bm25_candidate
** over a fixed FTS5 table of 64 rows with a generated query (its words and
** operators, and n, come from the input's last bytes).  Values are bound,
** never spliced into SQL text.
**
** The input is read as a stream of bytes (a short input reads as zeros):
**   byte 0           which statement (STATEMENTS below)
**   byte 1           the dimension (1 to 16) of well-formed vectors
**   then, per value  a kind byte and that kind's bytes (see make_value):
**                    NULL, an interesting or raw integer, an interesting or
**                    raw double (NaN, infinities, huge), raw text (any bytes,
**                    invalid UTF-8, NUL), a raw blob (any length), a float32
**                    blob (NaN, infinities, denormals, up to 262143
**                    dimensions), JSON-ish text built from tokens (numbers,
**                    separators, brackets, around 65536 numbers or 511
**                    digits), date and path text, a JSON array of ids,
**                    well-formed vectors of one dimension per input (byte 1),
**                    as blobs or JSON, and the words int8, float32, m1, m2.
**
** Beyond "no crash" (ASan and UBSan abort on any memory error or undefined
** behaviour), every answer is checked against the header's requirements:
** cosine in [-1, 1], bm25_score in [0, 1], decay in [0, 1], cosine_topk JSON
** valid with at most k rows, vector_blob/vector_json round trips exact, a
** vector_index k-nearest query the same rows and scores as cosine_topk over
** the rows the same conditions select (Requirement 10; both skip rows by error
** bounds, so this checks the bounds, and the writes that keep the blocks),
** bm25_candidate the same ranks as bm25() alone, to the bit (Requirement 11),
** and every error message starts with the name of a hybridsql function or of
** the table (Requirement 3) or is SQLite's own refusal.
**
** Build and run: see fuzz/README.md.
*/
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sqlite3.h"

int sqlite3_hybridsql_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

#define COUNT(a) (sizeof(a) / sizeof(*(a)))

typedef struct Input {
  const uint8_t *p;
  size_t n;
} Input;

static unsigned next_byte(Input *in) {
  if (in->n == 0) return 0;
  in->n--;
  return *in->p++;
}

static uint64_t next_bytes(Input *in, int count) {
  uint64_t x = 0;
  for (int i = 0; i < count; i++) x |= (uint64_t)next_byte(in) << (8 * i);
  return x;
}

/* Up to max bytes of raw input, the count given by the next two bytes. */
static const uint8_t *next_span(Input *in, size_t max, size_t *len) {
  size_t want = (size_t)next_bytes(in, 2);
  if (want > max) want = max;
  if (want > in->n) want = in->n;
  const uint8_t *p = in->p;
  in->p += want;
  in->n -= want;
  *len = want;
  return p;
}

static const int64_t INTS[] = {0,     1,     -1,         2,           3,         5,
                               10000, 10001, 65536,      65537,       INT32_MAX, INT32_MIN,
                               INT64_MAX, INT64_MIN, 1763683200, -86400};

static const double DOUBLES[] = {0.0,    -0.0,         1.0,   -1.0,    0.5,     -4.2,
                                 1e-300, 5e-324,       1e308, -1e308,  INFINITY, -INFINITY,
                                 NAN,    3.5e38,       1e39,  10000.0, 30.0,    1763683200.0,
                                 -1e18,  1e-9,         -0.5,  3.4028235e38};

static const float FLOATS[] = {0.0f,     -0.0f,   1.0f,   -1.0f,    0.1f,      FLT_MAX,
                               -FLT_MAX, FLT_MIN, 1e-45f, INFINITY, -INFINITY, NAN,
                               3.0f,     -2.5f,   1e-20f, 1e20f};

static const char *NUMBER_TOKENS[] = {
    "0",        "-0",      "1",          "-1",           "0.1",          "1e3",
    "1E-3",     "-2.5e+2", "1e39",       "-1e39",        "1e-50",        "3.4028235e38",
    "3.4028236e38", "123456789012345678901234567890",    "NaN",          "Infinity",
    "-",        "1.",      ".5",         "01",           "1e",           "0x10",
    "1e999",    "",        "true",       "null",         "\"1\"",        "1e+",
    "-.1",      "2e-45",   "1.17549435e-38", "9223372036854775807",      "9999999999999999999",
    "-9223372036854775808", "18446744073709551616"};

static const char *SEPARATORS[] = {",", ", ", " , ", "\t,\n", "", ",,", "]", "[",
                                   "{", "}", "\"", " ", "\r\n", ":"};

static const char *TIME_TOKENS[] = {
    "2026-11-21",           "2026-11-21T12:34",          "2026-11-21T12:34:56.789Z",
    "2026-11-21 00:00:00+05:30", "2026-02-29",           "2024-02-29",
    "0000-01-01",           "9999-12-31T23:59:59-23:59", "2026-13-01",
    "2026-11-21T24:00",     "2026-11-21T12:34:5",        "2026-11-21+0100",
    "2026-11-21T12:34+0100", "2026-11-21T12:34:56.",     "2026-11-21T12:34:56.5-00:00",
    "memory/2026-10-22.md", "2026-10-22.md",             "a\\2026-10-22.md",
    "memory/2026-10-22.mdx", "/",                        "",
    "memory/.md",           "x/2026-00-10.md",           "x/1970-01-01.md",
    "x/9999-12-31.md",      "2026-1-01.md",              "2026-11-21Z",
    "m1",                   "m2",                        "float32",
    "int8",                 "INT8",                      "[]"};

/* Appends to buf (capacity cap) and returns the new length. */
static size_t append(char *buf, size_t len, size_t cap, const char *s, size_t n) {
  if (len + n > cap) n = cap - len;
  memcpy(buf + len, s, n);
  return len + n;
}

#define TEXT_CAP (1 << 18)
#define MAX_FLOATS 262144
#define SLOTS 9

/* A value to bind, and the memory that holds its bytes. */
typedef struct Value {
  int type;
  int64_t i;
  double r;
  size_t n;
  char text[TEXT_CAP];
  float floats[MAX_FLOATS];
  int is_floats;
} Value;

static Value values[SLOTS];

/* JSON-ish text: '[' tokens and separators ']' with occasional raw bytes. */
static size_t json_text(Input *in, char *buf) {
  size_t len = 0;
  unsigned count = next_byte(in);
  unsigned style = next_byte(in);
  if (style & 1) len = append(buf, len, TEXT_CAP, " ", 1);
  if (!(style & 2)) len = append(buf, len, TEXT_CAP, "[", 1);
  if ((style & 0x8e) == 0x8e) count += 65408; /* around HS_MAX_DIMS (65536) */
  for (unsigned i = 0; i < count && len < TEXT_CAP; i++) {
    const char *num = NUMBER_TOKENS[next_byte(in) % COUNT(NUMBER_TOKENS)];
    len = append(buf, len, TEXT_CAP, num, strlen(num));
    if (i + 1 < count) {
      unsigned s = next_byte(in);
      const char *sep = (s & 0x80) ? SEPARATORS[s % COUNT(SEPARATORS)] : ",";
      len = append(buf, len, TEXT_CAP, sep, strlen(sep));
    }
  }
  if ((style & 0x48) == 0x48) { /* a number around HS_MAX_NUMBER (511) digits */
    char digits[600];
    memset(digits, '7', sizeof(digits));
    len = append(buf, len, TEXT_CAP, digits, 504 + (style >> 4));
  }
  if (!(style & 16)) len = append(buf, len, TEXT_CAP, "]", 1);
  if (style & 32) len = append(buf, len, TEXT_CAP, " \n", 2);
  if (style & 64) {
    size_t n;
    const uint8_t *raw = next_span(in, 64, &n);
    len = append(buf, len, TEXT_CAP, (const char *)raw, n);
  }
  return len;
}

/* A JSON array of small integer ids, mostly ones that exist in the tables. */
static size_t ids_text(Input *in, char *buf) {
  size_t len = append(buf, 0, TEXT_CAP, "[", 1);
  unsigned count = next_byte(in) % 24;
  for (unsigned i = 0; i < count; i++) {
    char num[32];
    int n = snprintf(num, sizeof(num), "%s%d", i ? "," : "", (int)(next_byte(in) % 40) - 8);
    len = append(buf, len, TEXT_CAP, num, (size_t)n);
  }
  return append(buf, len, TEXT_CAP, "]", 1);
}

/* The dimension that this input's well-formed vectors share, so that searches succeed. */
static size_t common_d;

static const char *WORDS[] = {"int8", "float32", "m1", "m2"};

/* Reads float32 values from the input into out. */
static void read_floats(Input *in, float *out, size_t d) {
  for (size_t j = 0; j < d; j++) {
    unsigned t = next_byte(in);
    if (t & 0x80) {
      uint32_t bits = (uint32_t)next_bytes(in, 4);
      memcpy(&out[j], &bits, sizeof(float));
    } else {
      out[j] = FLOATS[t % COUNT(FLOATS)];
    }
  }
}

/* Reads one value from the input into v. */
static void make_value(Input *in, Value *v) {
  unsigned kind = next_byte(in) % 13;
  size_t len;
  v->is_floats = 0;
  switch (kind) {
    case 0:
      v->type = SQLITE_NULL;
      break;
    case 1: {
      unsigned t = next_byte(in);
      v->type = SQLITE_INTEGER;
      v->i = (t & 0x80) ? (int64_t)next_bytes(in, 8) : INTS[t % COUNT(INTS)];
      break;
    }
    case 2: {
      unsigned t = next_byte(in);
      v->type = SQLITE_FLOAT;
      if (t & 0x80) {
        uint64_t bits = next_bytes(in, 8);
        memcpy(&v->r, &bits, sizeof(v->r));
      } else {
        v->r = DOUBLES[t % COUNT(DOUBLES)];
      }
      break;
    }
    case 3:
    case 4: {
      const uint8_t *raw = next_span(in, TEXT_CAP, &len);
      memcpy(v->text, raw, len);
      v->type = kind == 3 ? SQLITE_TEXT : SQLITE_BLOB;
      v->n = len;
      break;
    }
    case 5:
    case 6: { /* a float32 blob; kind 6 is longer, some around and past HS_MAX_DIMS */
      static const size_t LONG[] = {17,  64,  100,  127,  128,   129,   255,   256,
                                    384, 768, 1024, 1536, 65535, 65536, 65537, 262143};
      size_t d = kind == 5 ? next_byte(in) % 17 : LONG[next_byte(in) % COUNT(LONG)];
      unsigned pattern = next_byte(in);
      size_t head = d < 64 ? d : 64;
      read_floats(in, v->floats, head);
      for (size_t j = head; j < d; j += head) { /* the rest repeats the first 64 */
        memcpy(&v->floats[j], v->floats, sizeof(float) * (d - j < head ? d - j : head));
      }
      v->type = SQLITE_BLOB;
      v->is_floats = 1;
      v->n = d * sizeof(float) + ((pattern & 0x40) ? (pattern & 3) : 0); /* odd lengths */
      break;
    }
    case 7:
      v->type = SQLITE_TEXT;
      v->n = json_text(in, v->text);
      break;
    case 8: {
      const char *s = TIME_TOKENS[next_byte(in) % COUNT(TIME_TOKENS)];
      size_t n = append(v->text, 0, TEXT_CAP, s, strlen(s));
      const uint8_t *raw = next_span(in, 16, &len);
      if (next_byte(in) & 1) n = append(v->text, n, TEXT_CAP, (const char *)raw, len);
      v->type = SQLITE_TEXT;
      v->n = n;
      break;
    }
    case 9:
      v->type = SQLITE_TEXT;
      v->n = ids_text(in, v->text);
      break;
    case 10: /* a well-formed vector of the common dimension, as a blob */
      read_floats(in, v->floats, common_d);
      v->type = SQLITE_BLOB;
      v->is_floats = 1;
      v->n = common_d * sizeof(float);
      break;
    case 11: { /* the same as JSON text */
      float f[16];
      read_floats(in, f, common_d);
      v->n = append(v->text, 0, TEXT_CAP, "[", 1);
      for (size_t j = 0; j < common_d; j++) {
        char num[32];
        int n = snprintf(num, sizeof(num), "%s%.9g", j ? "," : "", (double)f[j]);
        v->n = append(v->text, v->n, TEXT_CAP, num, (size_t)n);
      }
      v->n = append(v->text, v->n, TEXT_CAP, "]", 1);
      v->type = SQLITE_TEXT;
      break;
    }
    default: {
      const char *w = WORDS[next_byte(in) % COUNT(WORDS)];
      v->n = append(v->text, 0, TEXT_CAP, w, strlen(w));
      v->type = SQLITE_TEXT;
      break;
    }
  }
}

static void bind(sqlite3_stmt *stmt, int i, const Value *v) {
  switch (v->type) {
    case SQLITE_NULL:
      sqlite3_bind_null(stmt, i);
      break;
    case SQLITE_INTEGER:
      sqlite3_bind_int64(stmt, i, v->i);
      break;
    case SQLITE_FLOAT:
      sqlite3_bind_double(stmt, i, v->r);
      break;
    case SQLITE_TEXT:
      sqlite3_bind_text(stmt, i, v->text, (int)v->n, SQLITE_STATIC);
      break;
    default:
      sqlite3_bind_blob(stmt, i, v->is_floats ? (const void *)v->floats : v->text, (int)v->n,
                        SQLITE_STATIC);
      break;
  }
}

enum Check { NONE, COSINE, BM25, DECAY, ROUND_TRIP, TOPK, VTOPK, BM25C };
enum Rows { NO_ROWS, FZ_ROWS, VECTOR_ROWS, FTS_QUERY };

static const struct {
  const char *sql;
  int nparams;
  enum Check check;
  enum Rows rows;
} STATEMENTS[] = {
    {"select cosine_similarity(?1, ?2)", 2, COSINE, NO_ROWS},
    {"select bm25_score(?1)", 1, BM25, NO_ROWS},
    {"select bm25_score(?1, ?2)", 2, BM25, NO_ROWS},
    {"select hybrid_score(?1, ?2)", 2, NONE, NO_ROWS},
    {"select hybrid_score(?1, ?2, ?3, ?4)", 4, NONE, NO_ROWS},
    {"select hybrid_score(?1, ?2, ?3, ?4, ?5)", 5, NONE, NO_ROWS},
    {"select temporal_decay(?1, ?2)", 2, DECAY, NO_ROWS},
    {"select temporal_decay(?1, ?2, ?3)", 3, DECAY, NO_ROWS},
    {"select vector_blob(?1)", 1, NONE, NO_ROWS},
    {"select vector_json(?1)", 1, NONE, NO_ROWS},
    /* Requirement 9: the JSON of a vector reads back as the same float32 values. */
    {"select vector_blob(?1) is vector_blob(vector_json(?1))", 1, ROUND_TRIP, NO_ROWS},
    /* Requirement 5: query and k from the first row, filters before the top-k. */
    {"select r, json_valid(r), json_array_length(r), ?2 from"
     " (select cosine_topk(?1, ?2, id, v) as r from fz where ?3 is null or id != ?3)",
     3, TOPK, FZ_ROWS},
    {"select r, json_valid(r), json_array_length(r), (select k from fz order by rowid limit 1)"
     " from (select cosine_topk(q, k, id, v) as r from fz)",
     0, TOPK, FZ_ROWS},
    /* Requirement 10: k-nearest queries, compared with cosine_topk (KNN_REFERENCE). */
    {"select rowid, score from vectors where vector match ?1 and k = ?2", 2, VTOPK, VECTOR_ROWS},
    {"select rowid, score from vectors where vector match ?1 and k = ?2 and model_id = ?3", 3,
     VTOPK, VECTOR_ROWS},
    {"select rowid, score from vectors where vector match ?1 and k = ?2"
     " and rowid in (select value from json_each(?3))",
     3, VTOPK, VECTOR_ROWS},
    {"select rowid, score from vectors where vector match ?1 and k = ?2 and n >= ?3", 3, VTOPK,
     VECTOR_ROWS},
    {"select rowid, score from vectors where vector match ?1 and k = ?2 and rowid > ?3"
     " and n != ?4",
     4, VTOPK, VECTOR_ROWS},
    {"select rowid, score from vectors where vector match ?1 order by score desc limit ?2", 2,
     NONE, VECTOR_ROWS},
    {"select rowid, model_id, n, vector from vectors where chunk_id = ?1", 1, NONE, VECTOR_ROWS},
    {"select rowid, model_id, n, length(vector) from vectors where model_id = ?1 or n < ?2", 2,
     NONE, VECTOR_ROWS},
    {"select hybridsql_version(), hybridsql_debug()", 0, NONE, NO_ROWS},
    /* Requirement 11: bm25_candidate, compared with plain bm25() on the same query. */
    {"select id, rank from (select rowid as id, bm25_candidate(ft, ?2) as rank from ft"
     " where ft match ?1) where rank is not null order by rank limit ?2",
     0, BM25C, FTS_QUERY},
};

/* The same without bm25_candidate. */
static const char *PLAIN_BM25 =
    "select rowid, bm25(ft) from ft where ft match ?1 order by bm25(ft) limit ?2";

/* ft's rows are made of these words; generated queries combine them with FTS5 operators. */
static const char *FT_WORDS[] = {"alpha", "beta", "gamma", "delta", "omega", "cell", "tumor",
                                 "gene"};
static const char *FT_JOINS[] = {" OR ", " OR ", " AND ", " NOT ", " ", " OR NEAR(", " OR \"a "};

/* cosine_topk over the rows each k-nearest statement selects (by its index), as (id, score). */
static const char *KNN_REFERENCE[] = {
    "",
    "and model_id = ?3",
    "and chunk_id in (select value from json_each(?3))",
    "and n >= ?3",
    "and chunk_id > ?3 and n != ?4",
};
static const char *COSINE_TOPK_OF_VECTORS =
    "select json_extract(value, '$[0]'), json_extract(value, '$[1]') from json_each(("
    " select cosine_topk(?1, ?2, chunk_id, vector) from vectors where 1 %s))";

static const char *FUNCTION_NAMES[] = {
    "cosine_similarity(): ", "cosine_topk(): ",    "bm25_score(): ",
    "hybrid_score(): ",      "temporal_decay(): ", "vector_blob(): ",
    "vector_json(): ",       "vectors: ",          "bm25_candidate(): ",
    "UNIQUE constraint failed: vectors.rowid"};

static sqlite3 *db;
static sqlite3_stmt *prepared[COUNT(STATEMENTS)];
static sqlite3_stmt *insert_fz, *clear_fz, *insert_vector, *delete_vector, *update_vector,
    *clear_vectors, *reference[COUNT(KNN_REFERENCE)], *plain;
static size_t first_knn; /* STATEMENTS index of the first k-nearest statement */

static void die(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_sql: %s: %s\n", what, detail);
  abort();
}

static sqlite3_stmt *prepare(const char *sql) {
  sqlite3_stmt *stmt;
  if (sqlite3_prepare_v2(db, sql, -1, &stmt, 0) != SQLITE_OK) die(sql, sqlite3_errmsg(db));
  return stmt;
}

static void run_to_end(sqlite3_stmt *stmt);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  if (sqlite3_open(":memory:", &db) != SQLITE_OK) die("open", sqlite3_errmsg(db));
  if (sqlite3_hybridsql_init(db, 0, 0) != SQLITE_OK) die("init", sqlite3_errmsg(db));
  /* fz for cosine_topk; vectors as hybridsql's schema declares its own, with a metadata column. */
  const char *schema =
      "create table fz(id, q, k, v);"
      "create virtual table vectors using vector_index(chunk_id integer primary key,"
      " vector float[], model_id text partition key, n integer);";
  if (sqlite3_exec(db, schema, 0, 0, 0) != SQLITE_OK) die("schema", sqlite3_errmsg(db));
  /* ft: 64 rows of 1 to 40 words, so that rows differ in length as bm25() weighs it. */
  if (sqlite3_exec(db, "create virtual table ft using fts5(text)", 0, 0, 0) != SQLITE_OK)
    die("fts5", sqlite3_errmsg(db));
  sqlite3_stmt *add = prepare("insert into ft(rowid, text) values (?1, ?2)");
  unsigned seed = 12345;
  for (int r = 1; r <= 64; r++) {
    char text[40 * 8] = "";
    seed = seed * 1103515245u + 12345u;
    for (unsigned w = 0, n = 1 + (seed >> 16) % 40; w < n; w++) {
      seed = seed * 1103515245u + 12345u;
      strcat(text, FT_WORDS[(seed >> 16) % COUNT(FT_WORDS)]);
      strcat(text, " ");
    }
    sqlite3_bind_int(add, 1, r);
    sqlite3_bind_text(add, 2, text, -1, SQLITE_TRANSIENT);
    run_to_end(add);
  }
  sqlite3_finalize(add);
  plain = prepare(PLAIN_BM25);
  for (size_t i = 0; i < COUNT(STATEMENTS); i++) prepared[i] = prepare(STATEMENTS[i].sql);
  insert_fz = prepare("insert into fz values (?1, ?2, ?3, ?4)");
  clear_fz = prepare("delete from fz");
  insert_vector = prepare("insert or replace into vectors(chunk_id, model_id, vector, n)"
                          " values (?1, ?2, ?3, ?4)");
  delete_vector = prepare("delete from vectors where chunk_id = ?1");
  update_vector = prepare("update vectors set model_id = ?2, n = ?3 where chunk_id = ?1");
  clear_vectors = prepare("delete from vectors");
  while (STATEMENTS[first_knn].check != VTOPK) first_knn++;
  for (size_t i = 0; i < COUNT(KNN_REFERENCE); i++) {
    if (STATEMENTS[first_knn + i].check != VTOPK) die("KNN_REFERENCE", "one per VTOPK statement");
    char *sql = sqlite3_mprintf(COSINE_TOPK_OF_VECTORS, KNN_REFERENCE[i]);
    reference[i] = prepare(sql);
    sqlite3_free(sql);
  }
  return 0;
}

static void run_to_end(sqlite3_stmt *stmt) {
  sqlite3_step(stmt);
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
}

/* Fills fz with up to 16 rows of generated (id, q, k, v). */
static void fill_fz(Input *in) {
  run_to_end(clear_fz);
  unsigned rows = next_byte(in) % 17;
  for (unsigned r = 0; r < rows; r++) {
    unsigned shape = next_byte(in);
    if (shape & 1) {
      make_value(in, &values[5]);
      bind(insert_fz, 1, &values[5]);
    } else {
      sqlite3_bind_int64(insert_fz, 1, (int64_t)(shape >> 1) - 8);
    }
    for (int i = 2; i <= 4; i++) {
      make_value(in, &values[4 + i]);
      bind(insert_fz, i, &values[4 + i]);
    }
    if (sqlite3_step(insert_fz) != SQLITE_DONE) die("insert into fz", sqlite3_errmsg(db));
    sqlite3_reset(insert_fz);
    sqlite3_clear_bindings(insert_fz);
  }
}

/*
** Writes up to 24 generated operations to vectors: inserts (or replaces) of a
** generated vector in partition m1, m2 or a generated value, deletes, and
** updates that move a row to another partition.  What the table refuses is
** left out.  With the first byte's top bit, in a transaction that stays open
** for the statement (so that the rows the table holds, Appended in
** vector_index/held.c, meet its reads), with savepoints begun and rolled back to
** between the operations; LLVMFuzzerTestOneInput commits it and reads every
** row back.
*/
static void fill_vectors(Input *in) {
  unsigned head = next_byte(in), ops = head % 25;
  if (head & 0x80) sqlite3_exec(db, "begin", 0, 0, 0);
  run_to_end(clear_vectors);
  for (unsigned r = 0; r < ops; r++) {
    unsigned shape = next_byte(in);
    if ((head & 0x80) && (shape & 0x3f) == 0x3e) { /* refused without one: no matter */
      sqlite3_exec(db, (shape & 0x40) ? "rollback to s" : "savepoint s", 0, 0, 0);
      continue;
    }
    int64_t id = (int64_t)(shape % 40) - 8;
    if ((shape & 0xc0) == 0xc0) {
      sqlite3_bind_int64(delete_vector, 1, id);
      run_to_end(delete_vector);
      continue;
    }
    sqlite3_stmt *st = (shape & 0xc0) == 0x80 ? update_vector : insert_vector;
    sqlite3_bind_int64(st, 1, id);
    if (shape & 0x20) {
      make_value(in, &values[5]);
      bind(st, 2, &values[5]);
    } else {
      sqlite3_bind_text(st, 2, (shape & 0x10) ? "m2" : "m1", 2, SQLITE_STATIC);
    }
    if (st == update_vector) {
      sqlite3_bind_int64(st, 3, next_byte(in) % 8);
    } else {
      make_value(in, &values[6]);
      bind(st, 3, &values[6]);
      sqlite3_bind_int64(st, 4, next_byte(in) % 8);
    }
    run_to_end(st); /* a refused value just leaves the row as it was */
  }
}

static void check_error(const char *sql) {
  const char *msg = sqlite3_errmsg(db);
  for (size_t i = 0; i < COUNT(FUNCTION_NAMES); i++) {
    if (strncmp(msg, FUNCTION_NAMES[i], strlen(FUNCTION_NAMES[i])) == 0) return;
  }
  /* What SQLite itself refuses is an honest error too. */
  if (strcmp(msg, "out of memory") == 0 || strcmp(msg, "string or blob too big") == 0) return;
  if (strcmp(msg, "datatype mismatch") == 0) return; /* a LIMIT that is not an integer */
  if (strstr(msg, "JSON")) return;                       /* json_each refusing the id list */
  if (strncmp(msg, "fts5: ", 6) == 0) return; /* FTS5 refusing a generated query */
  fprintf(stderr, "statement: %s\n", sql);
  die("error text names no function (Requirement 3)", msg);
}

static void check_row(sqlite3_stmt *stmt, enum Check check, const char *sql) {
  int type = sqlite3_column_type(stmt, 0);
  double x = sqlite3_column_double(stmt, 0);
  switch (check) {
    case COSINE:
      if (type != SQLITE_NULL && !(x >= -1.0 && x <= 1.0)) die(sql, "cosine outside [-1, 1]");
      break;
    case BM25:
      if (type != SQLITE_NULL && !(x >= 0.0 && x <= 1.0)) die(sql, "bm25_score outside [0, 1]");
      break;
    case DECAY:
      if (type != SQLITE_NULL && !(x >= 0.0 && x <= 1.0)) die(sql, "decay outside [0, 1]");
      break;
    case ROUND_TRIP:
      if (type != SQLITE_NULL && sqlite3_column_int(stmt, 0) != 1)
        die(sql, "vector_json does not read back as the same vector");
      break;
    case TOPK:
      if (type == SQLITE_NULL) break;
      if (sqlite3_column_int(stmt, 1) != 1) die(sql, "cosine_topk gave invalid JSON");
      /* No rows give '[]' whatever k is; otherwise k was checked (1 to HS_MAX_K). */
      if (sqlite3_column_int64(stmt, 2) > 0 &&
          (sqlite3_column_type(stmt, 3) != SQLITE_INTEGER ||
           sqlite3_column_int64(stmt, 2) > sqlite3_column_int64(stmt, 3)))
        die(sql, "cosine_topk gave more than k rows");
      break;
    case BM25C:
      break;
    case VTOPK:
      if (!(sqlite3_column_double(stmt, 1) >= -1.0 && sqlite3_column_double(stmt, 1) <= 1.0))
        die(sql, "k-nearest score outside [-1, 1]");
      break;
    case NONE:
      break;
  }
}

typedef struct Hits {
  int64_t n, id[64];
  double score[64];
} Hits;

/*
** Runs stmt to the end, keeping (id, score) rows; 0 when it fails.  A failure
** of a hybridsql statement must name the function; the reference statement may
** also fail in SQLite's json_each.
*/
static int collect(sqlite3_stmt *stmt, enum Check check, const char *sql, Hits *hits,
                   int reference) {
  int rc;
  hits->n = 0;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    check_row(stmt, check, sql);
    if (hits->n < 64) {
      hits->id[hits->n] = sqlite3_column_int64(stmt, 0);
      hits->score[hits->n++] = sqlite3_column_double(stmt, 1);
    }
  }
  if (rc != SQLITE_DONE && !reference) check_error(sql);
  return rc == SQLITE_DONE;
}

/* Requirement 10: where both answer, a k-nearest query gives cosine_topk's rows and scores. */
static void compare_with_cosine_topk(size_t which, const Hits *got) {
  Hits want;
  sqlite3_stmt *ref = reference[which - first_knn];
  for (int i = 1; i <= STATEMENTS[which].nparams; i++) bind(ref, i, &values[i - 1]);
  int ok = collect(ref, NONE, COSINE_TOPK_OF_VECTORS, &want, 1);
  sqlite3_reset(ref);
  sqlite3_clear_bindings(ref);
  if (!ok) return;
  int same = got->n == want.n;
  for (int64_t i = 0; same && i < got->n; i++) {
    same = got->id[i] == want.id[i] && got->score[i] == want.score[i];
  }
  if (!same) {
    for (int64_t i = 0; i < got->n || i < want.n; i++) {
      fprintf(stderr, "  %lld: vector_index %lld %.17g, cosine_topk %lld %.17g\n", (long long)i,
              (long long)(i < got->n ? got->id[i] : -1), i < got->n ? got->score[i] : 0,
              (long long)(i < want.n ? want.id[i] : -1), i < want.n ? want.score[i] : 0);
    }
    die("a k-nearest query differs from cosine_topk (Requirement 10)", STATEMENTS[which].sql);
  }
}

/* An FTS5 query of FT_WORDS and operators (balanced, so that FTS5 accepts most), and n. */
static void make_fts_query(Input *in, char *query, int *n) {
  int open = 0;
  query[0] = 0;
  for (unsigned t = 0, terms = 1 + next_byte(in) % 6; t < terms; t++) {
    if (t) {
      const char *join = FT_JOINS[next_byte(in) % COUNT(FT_JOINS)];
      strcat(query, join);
      open += strchr(join, '(') != 0;
      if (strchr(join, '"')) {
        strcat(query, FT_WORDS[next_byte(in) % COUNT(FT_WORDS)]);
        strcat(query, "\" ");
      }
    }
    strcat(query, FT_WORDS[next_byte(in) % COUNT(FT_WORDS)]);
  }
  while (open-- > 0) strcat(query, ")");
  *n = (int)(next_byte(in) % 20); /* 0 is an error */
}

static void bind_fts_query(sqlite3_stmt *stmt, const char *query, int n) {
  sqlite3_bind_text(stmt, 1, query, -1, SQLITE_STATIC);
  sqlite3_bind_int(stmt, 2, n);
}

/* Requirement 11: the same ranks as plain bm25(), in the same order. */
static void compare_with_bm25(const char *query, int n, const Hits *got) {
  Hits want;
  bind_fts_query(plain, query, n);
  int ok = collect(plain, NONE, PLAIN_BM25, &want, 1);
  sqlite3_reset(plain);
  sqlite3_clear_bindings(plain);
  if (!ok) return;
  int same = got->n == want.n;
  for (int64_t i = 0; same && i < got->n; i++) same = got->score[i] == want.score[i];
  if (!same) {
    for (int64_t i = 0; i < got->n || i < want.n; i++) {
      fprintf(stderr, "  %lld: with bm25_candidate %lld %.17g, bm25 alone %lld %.17g\n",
              (long long)i, (long long)(i < got->n ? got->id[i] : -1),
              i < got->n ? got->score[i] : 0, (long long)(i < want.n ? want.id[i] : -1),
              i < want.n ? want.score[i] : 0);
    }
    die("bm25_candidate changes the n best (Requirement 11)", query);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Input in = {data, size};
  size_t which = next_byte(&in) % COUNT(STATEMENTS);
  common_d = 1 + next_byte(&in) % 16;
  sqlite3_stmt *stmt = prepared[which];
  if (STATEMENTS[which].rows == FZ_ROWS) fill_fz(&in);
  if (STATEMENTS[which].rows == VECTOR_ROWS) fill_vectors(&in);
  for (int i = 1; i <= STATEMENTS[which].nparams; i++) {
    make_value(&in, &values[i - 1]);
    bind(stmt, i, &values[i - 1]);
  }
  char query[512];
  int n = 0;
  if (STATEMENTS[which].rows == FTS_QUERY) {
    make_fts_query(&in, query, &n);
    bind_fts_query(stmt, query, n);
  }
  Hits hits;
  int ok = collect(stmt, STATEMENTS[which].check, STATEMENTS[which].sql, &hits, 0);
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
  if (ok && STATEMENTS[which].check == VTOPK) compare_with_cosine_topk(which, &hits);
  if (ok && STATEMENTS[which].check == BM25C) compare_with_bm25(query, n, &hits);
  if (!sqlite3_get_autocommit(db)) { /* fill_vectors' transaction */
    if (sqlite3_exec(db, "commit", 0, 0, 0) != SQLITE_OK) die("commit", sqlite3_errmsg(db));
    /* Every row read back, each block checked against its checksum on the way (the system
    ** SQLite may predate xIntegrity, 3.44), as many as there are locations. */
    sqlite3_stmt *check = prepare("select (select count(*) from vectors where vector is not null),"
                                  " (select count(*) from vectors_rowids)");
    if (sqlite3_step(check) != SQLITE_ROW) die("the rows after the transaction", sqlite3_errmsg(db));
    if (sqlite3_column_int64(check, 0) != sqlite3_column_int64(check, 1)) {
      die("the rows after the transaction", "fewer rows than locations");
    }
    sqlite3_finalize(check);
  }
  return 0;
}
