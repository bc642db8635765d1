/*
** bm25_candidate of functions/bm25_candidate.c (Requirement 11), for the entry point.
*/
#ifndef HYBRIDSQL_FUNCTIONS_BM25_CANDIDATE_H
#define HYBRIDSQL_FUNCTIONS_BM25_CANDIDATE_H
#include "sqlite3ext.h"

/* Registers bm25_candidate with FTS5, when this SQLite has FTS5; an SQLite result code. */
int hs_bm25_candidate_register(sqlite3 *db);

#endif
