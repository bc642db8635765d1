/*
** hybridsql: hybrid keyword + vector search for SQLite.
**
** A loadable extension whose entry point, sqlite3_hybridsql_init (SQLite derives the name from
** the library's file name, hybridsql.so), registers every part below on a connection.  Each
** SQL function's signature, meaning and example are in the header comment of its file, with
** the numbered requirements the code cites ("Requirement 4"); the numbers are the extension's:
**
**   cosine_similarity, cosine_topk, bm25_score, hybrid_score, temporal_decay, vector_blob,
**   vector_json, hybridsql_version, hybridsql_debug, hybridsql_simd
**                      functions/scalar.c          Requirements 1 to 9
**   vector_index       vector_index/vector_index.c  Requirement 10 (and match())
**   bm25_candidate     functions/bm25_candidate.c  Requirement 11 (an FTS5 function)
**   embed, hybridsql_model
**                      model/embedsql.c            Requirements 12 to 17
**
** The layers, lowest first; a file includes the headers of its own layer and those below, never
** one above (tests/test_layout.py checks it):
**
**   common.h           HS_EXPORT and the limits every layer shares
**   kernels/           no SQLite: the dot products, checksums and their run-time SIMD dispatch
**                      (simd.c), the top-k heap and int8 records (topk.c), scores and dates
**                      (scores.c), vector text (vectext.c)
**   model/tokenizer.c, model/model.c
**                      no SQLite: the embedding engine's tokenizer and forward pass
**   functions/args.c   SQLite's routines (sqlite3_api), reading SQL arguments, errors
**   functions/, vector_index/, model/embedsql.c
**                      the SQL functions, the virtual table, embed()
**   hybridsql.c        this entry point; hybridsql.h, what the library exports
*/
#include "hybridsql.h"

#include "functions/args.h"
#include "functions/bm25_candidate.h"
#include "functions/scalar.h"
#include "kernels/simd.h"
#include "model/embedsql.h"
#include "model/model.h"     /* so that the compiler checks hybridsql.h's copies of */
#include "model/tokenizer.h" /* the declarations their definitions see */
#include "vector_index/vector_index.h"

/* Sets *pzErrMsg to "hybridsql: cannot register NAME: why" and returns rc. */
static int init_error(sqlite3 *db, char **pzErrMsg, const char *name, int rc) {
  if (pzErrMsg) {
    *pzErrMsg = sqlite3_mprintf("hybridsql: cannot register %s: %s", name,
                                rc == SQLITE_NOMEM ? "out of memory" : sqlite3_errmsg(db));
  }
  return rc;
}

/*
** The library exports this entry point and the kernels of hybridsql.h (HS_EXPORT), nothing else:
** every build uses -fvisibility=hidden.
*/
HS_EXPORT int sqlite3_hybridsql_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
  /* sqlite3_api is one pointer for the whole process. A second SQLite library in it (apsw and
  ** Python's sqlite3 each may bring their own) would send the first one's calls into its own
  ** code, with its own mutexes and structures: the heap was corrupted under Datasette. */
#ifndef SQLITE_CORE /* compiled into SQLite itself (the fuzzers), there is no pointer */
  if (sqlite3_api && sqlite3_api != pApi) {
    if (pzErrMsg) {
      *pzErrMsg = pApi->mprintf(
          "hybridsql: already loaded into another SQLite library in this process (SQLite %s):"
          " one process can give the extension to one SQLite library only",
          sqlite3_api->libversion());
    }
    return SQLITE_ERROR;
  }
#endif
  SQLITE_EXTENSION_INIT2(pApi);
  dot2();
  const char *failed = 0;
  int rc = hs_vector_index_register(db, &failed);
  if (rc != SQLITE_OK) return init_error(db, pzErrMsg, failed, rc);
  rc = hs_functions_register(db, &failed);
  if (rc != SQLITE_OK) return init_error(db, pzErrMsg, failed, rc);
  rc = hs_embed_register(db);
  if (rc != SQLITE_OK) return init_error(db, pzErrMsg, "embed", rc);
  rc = hs_bm25_candidate_register(db);
  return rc == SQLITE_OK ? rc : init_error(db, pzErrMsg, "bm25_candidate", rc);
}
