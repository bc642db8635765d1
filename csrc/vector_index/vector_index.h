/*
** vector_index (vector_index/vector_index.c, Requirement 10), for the entry point.
*/
#ifndef HYBRIDSQL_VECTOR_INDEX_H
#define HYBRIDSQL_VECTOR_INDEX_H
#include "sqlite3ext.h"

/* Registers the module vector_index and match() on db: SQLITE_OK, or the error of what failed,
** named in *failed ("vector_index" or "match"). */
int hs_vector_index_register(sqlite3 *db, const char **failed);

#endif
