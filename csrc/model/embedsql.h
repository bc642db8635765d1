/*
** embed() and hybridsql_model() (csrc/model/embedsql.c): the SQL side of the embedding engine.
*/
#ifndef HYBRIDSQL_EMBEDSQL_H
#define HYBRIDSQL_EMBEDSQL_H
#include "sqlite3ext.h"

/* Registers embed(text) and hybridsql_model(source) on db; an SQLite result code. */
int hs_embed_register(sqlite3 *db);

#endif
