/*
** The scalar SQL functions of functions/scalar.c (Requirements 1 to 9), for the entry point.
*/
#ifndef HYBRIDSQL_FUNCTIONS_SCALAR_H
#define HYBRIDSQL_FUNCTIONS_SCALAR_H
#include "sqlite3ext.h"

/* Registers them on db: SQLITE_OK, or the error of the first that failed, named in *failed. */
int hs_functions_register(sqlite3 *db, const char **failed);

#endif
