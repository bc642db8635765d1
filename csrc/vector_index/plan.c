/*
** xBestIndex: the plan of a query (Requirement 10 in vector_index.c), written into idxStr for
** xFilter (scan.c), and match(), what `VECTOR match Q` calls where no plan takes it.
*/
#include "vector_index/internal.h"

#include <string.h>

static char op_char(unsigned char op) {
  switch (op) {
    case SQLITE_INDEX_CONSTRAINT_EQ: return '=';
    case SQLITE_INDEX_CONSTRAINT_GT: return '>';
    case SQLITE_INDEX_CONSTRAINT_LE: return '{';
    case SQLITE_INDEX_CONSTRAINT_LT: return '<';
    case SQLITE_INDEX_CONSTRAINT_GE: return '}';
    case SQLITE_INDEX_CONSTRAINT_NE: return '!';
    case SQLITE_INDEX_CONSTRAINT_IS: return 'i';
    case SQLITE_INDEX_CONSTRAINT_ISNOT: return 'n';
    case SQLITE_INDEX_CONSTRAINT_ISNULL: return '0';
    case SQLITE_INDEX_CONSTRAINT_ISNOTNULL: return '1';
    case SQLITE_INDEX_CONSTRAINT_LIKE: return 'l';
    case SQLITE_INDEX_CONSTRAINT_GLOB: return 'g';
    default: return 0;
  }
}

const char *op_sql(char op) {
  switch (op) {
    case '=': return "= ?";
    case '>': return "> ?";
    case '{': return "<= ?";
    case '<': return "< ?";
    case '}': return ">= ?";
    case '!': return "!= ?";
    case 'i': return "is ?";
    case 'n': return "is not ?";
    case '0': return "is null";
    case '1': return "is not null";
    case 'l': return "like ?";
    default: return "glob ?";
  }
}

/* Appends " and <column> <op>" for a token, and its values to b. */
int add_cond(sqlite3_str *sql, Binds *b, const char *column, char op, char coll,
             sqlite3_value *arg) {
  static const char *const colls[] = {"", " collate nocase", " collate rtrim"};
  const char *c = coll == 'n' ? colls[1] : coll == 'r' ? colls[2] : colls[0];
  if (op == 'I') {
    sqlite3_str_appendf(sql, " and %s%s in (", column, c);
    sqlite3_value *v;
    int rc = sqlite3_vtab_in_first(arg, &v), first = 1;
    for (; rc == SQLITE_OK && v; rc = sqlite3_vtab_in_next(arg, &v)) {
      sqlite3_str_appendall(sql, first ? "?" : ", ?");
      first = 0;
      if ((rc = binds_add(b, v)) != SQLITE_OK) return rc;
    }
    sqlite3_str_appendall(sql, ")");
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
  }
  sqlite3_str_appendf(sql, " and %s%s %s", column, c, op_sql(op));
  return op == '0' || op == '1' ? SQLITE_OK : binds_add(b, arg);
}

/* Whether this SQLite hands an IN list over whole (sqlite3_vtab_in, 3.38). */
int vtab_in_ok;

/*
** The plan of a query (Requirement 10).  Without MATCH it is a scan of the
** rows its conditions select.  With MATCH, every condition the table takes
** (argvIndex, then omit) is one xFilter honours exactly, alone and with the
** others: a k-nearest query over the rows they select cannot be split, so an
** IN list is taken whole or not at all, two rowid conditions are both applied,
** and k is one number.  What it does not take SQLite tests on the rows it gets;
** with k, that is allowed only where the test keeps the rows a test before the
** top k would (same_after), and any other usable condition is refused.
** LIMIT stands for k only where nothing is left for SQLite to test and the
** rows come out in the ORDER BY's order (none, or score desc).  SQLite agrees:
** it hands LIMIT over only when every condition of the statement is one of
** this table's, and uses a plan that takes it only if the plan takes every
** other condition too, so an OR or an expression leaves it with SQLite.
** Without k or such a LIMIT, a MATCH query gives every row its conditions
** select, best first, and SQLite applies the ORDER BY and LIMIT.
**
** An OR whose branches each are a condition of this table is not among the
** constraints: SQLite asks about each branch (with the AND terms beside it) to
** cost a MULTI-INDEX OR plan, in calls no different from those of a query
** with that branch as an AND term, and such a plan returns the union of what
** each branch's xFilter gives.  The K nearest of each branch are not the K
** nearest of their union, so no k-nearest plan can answer the OR, and no call
** can tell the table that there is one: such plans cost more than the plan
** without the branch (VX_COND_COST), which SQLite then takes, testing the OR on
** its K rows as Requirement 10 says.
**
** Costs: a k-nearest plan that takes only conditions with values costs least,
** so SQLite neither asks it once per row of another table (a plan that takes
** a condition on another table's column costs 1e6 more a condition), nor
** answers its OR terms by scans: a scan of a table whose vector, score or k
** the statement uses costs 1e12 times more (those are a k-nearest query's
** columns; a scan for a statement that uses them keeps its ranking of scans).
*/
#define VX_SCAN_FACTOR 1e12
#define VX_COND_COST 1e6

/* IN lists are handed over whole for the first 32 constraints only (sqlite3_vtab_in). */
#define VX_MAX_IN 32

/*
** Whether SQLite's test of condition c on a k-nearest query's K rows keeps the
** same rows as the test before the top k would: so for the k column (one value
** for the whole query), the vector IS [NOT] NULL (no row's is NULL), and score
** >, >=, IS [NOT] NULL (the rows are in descending score, so what passes is a
** head of them).
*/
static int same_after(const VxTab *t, const struct sqlite3_index_constraint *c) {
  int op = c->op;
  if (c->iColumn == VX_K(t)) return 1;
  if (op == SQLITE_INDEX_CONSTRAINT_ISNULL || op == SQLITE_INDEX_CONSTRAINT_ISNOTNULL)
    return c->iColumn == VX_SCORE(t) || c->iColumn == t->vec;
  return c->iColumn == VX_SCORE(t) &&
         (op == SQLITE_INDEX_CONSTRAINT_GT || op == SQLITE_INDEX_CONSTRAINT_GE);
}

/* A condition's operator as SQL writes it. */
static const char *op_word(unsigned char op) {
  switch (op) {
    case SQLITE_INDEX_CONSTRAINT_EQ: return "=";
    case SQLITE_INDEX_CONSTRAINT_GT: return ">";
    case SQLITE_INDEX_CONSTRAINT_LE: return "<=";
    case SQLITE_INDEX_CONSTRAINT_LT: return "<";
    case SQLITE_INDEX_CONSTRAINT_GE: return ">=";
    case SQLITE_INDEX_CONSTRAINT_NE: return "!=";
    case SQLITE_INDEX_CONSTRAINT_IS: return "is";
    case SQLITE_INDEX_CONSTRAINT_ISNOT: return "is not";
    case SQLITE_INDEX_CONSTRAINT_ISNULL: return "is null";
    case SQLITE_INDEX_CONSTRAINT_ISNOTNULL: return "is not null";
    case SQLITE_INDEX_CONSTRAINT_LIKE: return "like";
    case SQLITE_INDEX_CONSTRAINT_GLOB: return "glob";
    case SQLITE_INDEX_CONSTRAINT_REGEXP: return "regexp";
    case SQLITE_INDEX_CONSTRAINT_MATCH: return "match";
    default: return "?";
  }
}

/*
** A k-nearest query handed a condition that the table cannot apply before the
** top k (Requirement 10): an error that names it and the two ways to write the
** query, rather than K rows that SQLite then filters down to fewer.
*/
static int refuse_knn(VxTab *t, sqlite3_index_info *info, int i) {
  const struct sqlite3_index_constraint *c = &info->aConstraint[i];
  int col = c->iColumn, unary = c->op == SQLITE_INDEX_CONSTRAINT_ISNULL ||
                                c->op == SQLITE_INDEX_CONSTRAINT_ISNOTNULL;
  const char *name = col < 0 || col == t->alias ? "rowid"
                     : col == VX_SCORE(t)       ? "score"
                                                : t->col[col].name;
  const char *coll = sqlite3_vtab_collation(info, i);
  char collate[80] = "";
  if (coll && sqlite3_stricmp(coll, "BINARY") != 0)
    sqlite3_snprintf(sizeof(collate), collate, " collate %s", coll);
  return vx_fail(t, SQLITE_ERROR, "%s: k = N takes the N nearest of the rows its conditions"
                 " select, and the table cannot apply \"%s %s%s%s\" before the top N: write"
                 " \"order by score desc limit N\" instead of k = N, or put the condition in"
                 " \"rowid in (select rowid from %s where ...)\"", t->name, name,
                 op_word(c->op), unary ? "" : " ...", collate, t->name);
}

int vx_best_index(sqlite3_vtab *vt, sqlite3_index_info *info) {
  VxTab *t = (VxTab *)vt;
  int match = -1, n = 0, rowid_eq = 0, eq = 0, conds = 0, all_taken = 1, has_k = 0;
  int limit = -1, offset = -1, k_taken = 0, refused = -1;
  for (int i = 0; i < info->nConstraint; i++) {
    const struct sqlite3_index_constraint *c = &info->aConstraint[i];
    if (c->op == SQLITE_INDEX_CONSTRAINT_MATCH && c->iColumn == t->vec) {
      if (!c->usable) return SQLITE_CONSTRAINT; /* only plans where the query vector is known */
      if (match >= 0) {
        return vx_fail(t, SQLITE_ERROR, "%s: a query has one MATCH vector, this one has two",
                       t->name);
      }
      match = i;
    }
  }
  char *plan = sqlite3_malloc64((sqlite3_uint64)info->nConstraint * VX_TOKEN + 1);
  if (!plan) return SQLITE_NOMEM;
  plan[0] = 0;
  for (int pass = 0; pass < 2; pass++) { /* the MATCH vector first */
    for (int i = 0; i < info->nConstraint; i++) {
      const struct sqlite3_index_constraint *c = &info->aConstraint[i];
      if ((pass == 0) != (i == match)) continue;
      if (c->op == SQLITE_INDEX_CONSTRAINT_LIMIT || c->op == SQLITE_INDEX_CONSTRAINT_OFFSET) {
        if (c->usable && c->op == SQLITE_INDEX_CONSTRAINT_LIMIT) limit = i;
        else if (c->usable) offset = i;
        continue; /* decided below, once every other condition is */
      }
      if (c->iColumn == VX_K(t)) has_k = 1;
      if (!c->usable) {
        all_taken = 0;
        continue;
      }
      int col = c->iColumn;
      char role = 0, op = op_char(c->op), coll = 'b';
      if (i == match) {
        role = 'M', op = '=';
      } else if (col == VX_K(t) && op == '=') {
        role = 'K', k_taken = 1;
      } else if (col < 0 || col == t->alias) {
        if (!op || op == 'l' || op == 'g') {
          all_taken = 0;
          if (refused < 0) refused = i;
          continue;
        }
        role = 'R', col = 0;
        if (op == 'i') op = '=';
        if (op == '=') rowid_eq = 1;
      } else if (col < t->ncol && op &&
                 (t->col[col].role == VX_PARTITION || t->col[col].role == VX_METADATA)) {
        const char *name = sqlite3_vtab_collation(info, i);
        if (sqlite3_stricmp(name, "BINARY") == 0) coll = 'b';
        else if (sqlite3_stricmp(name, "NOCASE") == 0) coll = 'n';
        else if (sqlite3_stricmp(name, "RTRIM") == 0) coll = 'r';
        else { /* another collation: SQLite tests it */
          all_taken = 0;
          if (refused < 0) refused = i;
          continue;
        }
        role = t->col[col].role == VX_PARTITION ? 'P' : 'X';
        if (op == '=') eq++;
      } else {
        all_taken = 0;
        if (refused < 0 && !same_after(t, c)) refused = i;
        continue;
      }
      if (match >= 0 && op == '=' && role != 'M') {
        /* An IN list handed over one value at a time would split the k-nearest query.  Before
        ** 3.38 no IN list can be told apart: k = N is taken (k in (...) is no filter anyone
        ** needs), a filter is refused. */
        if (vtab_in_ok && sqlite3_vtab_in(info, i, 1)) {
          op = 'I';
        } else if (!vtab_in_ok && role != 'K') {
          sqlite3_free(plan);
          return vx_fail(t, SQLITE_ERROR, "%s: a MATCH query with = or IN conditions needs"
                         " SQLite 3.38 or later, which hands an IN list over whole; this is %s",
                         t->name, sqlite3_libversion());
        } else if (vtab_in_ok && i >= VX_MAX_IN) {
          sqlite3_free(plan);
          return vx_fail(t, SQLITE_ERROR, "%s: a MATCH query takes = and IN conditions among"
                         " its first %d only (SQLite hands an IN list over whole only there),"
                         " and condition %d is one: write them first", t->name, VX_MAX_IN, i + 1);
        }
      }
      if (role != 'M' && role != 'K') conds++;
      info->aConstraintUsage[i].argvIndex = ++n;
      info->aConstraintUsage[i].omit = 1;
      sqlite3_snprintf(VX_TOKEN + 1, plan + VX_TOKEN * (n - 1), "%c%02x%c%c", role, col, op,
                       coll);
    }
  }
  if (match >= 0 && k_taken && refused >= 0) {
    sqlite3_free(plan);
    return refuse_knn(t, info, refused);
  }
  double rows = t->rows > 0 ? (double)t->rows : 1.0;
  for (int i = 0; i < eq; i++) rows /= 10.0;
  if (match >= 0) {
    int o = info->nOrderBy;
    const struct sqlite3_index_orderby *ob = info->aOrderBy;
    info->orderByConsumed =
        (o >= 1 && ob[0].iColumn == VX_SCORE(t) && ob[0].desc) &&
        (o == 1 || (o == 2 && (ob[1].iColumn < 0 || ob[1].iColumn == t->alias) && !ob[1].desc));
    /* LIMIT (and OFFSET) for k: the first rows SQLite keeps are then the best ones. */
    if (limit >= 0 && !has_k && all_taken && (o == 0 || info->orderByConsumed)) {
      int at[2] = {limit, offset};
      for (int j = 0; j < 2 && at[j] >= 0; j++) {
        info->aConstraintUsage[at[j]].argvIndex = ++n;
        sqlite3_snprintf(VX_TOKEN + 1, plan + VX_TOKEN * (n - 1), "%c00=b", j ? 'O' : 'L');
      }
    }
    /* Without k: the rows may be made best first as SQLite asks for them where it takes them in
    ** that order (knn.c), and must all be before it sorts them otherwise. */
    info->idxNum = 1 | (!has_k && (o == 0 || info->orderByConsumed) ? 2 : 0);
    info->estimatedCost = 10.0 + VX_COND_COST * conds;
    info->estimatedRows = 10;
  } else {
    double scale = 1.0;
    for (int col = 0; col <= VX_K(t); col++) {
      if ((col == t->vec || col >= VX_SCORE(t)) &&
          (info->colUsed & ((sqlite3_uint64)1 << (col < 63 ? col : 63))))
        scale = VX_SCAN_FACTOR;
    }
    if (rowid_eq) {
      info->estimatedCost = 10.0 * scale;
      info->estimatedRows = 1;
      info->idxFlags |= SQLITE_INDEX_SCAN_UNIQUE;
    } else {
      info->estimatedCost = (100.0 + 4.0 * rows) * scale;
      info->estimatedRows = (sqlite3_int64)rows + 1;
    }
  }
  info->idxStr = plan;
  info->needToFreeIdxStr = 1;
  return SQLITE_OK;
}

/*
** match(Q, VECTOR): what `VECTOR match Q` calls where no vector_index plan
** takes it (under OR or NOT, on another column): an error, never an answer.
** SQLite's own stand-in (sqlite3_overload_function) says the same but is not
** INNOCUOUS, so a view holding a k-nearest query failed under pragma
** trusted_schema = 0 ("unsafe use of match()"); this one reads and changes
** nothing, so it is.
*/
#define VX_MATCH_STANDIN "unable to use function MATCH in the requested context"

static void match_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc, (void)argv;
  sqlite3_result_error(ctx, "match(): a vector_index table answers MATCH on its vector column"
                       " only as a condition of the WHERE clause joined by AND (not under OR"
                       " or NOT)", -1);
}

/* Registers match() where the connection has none or SQLite's stand-in, never over another. */
int register_match(sqlite3 *db) {
  sqlite3_stmt *st = 0;
  int rc = sqlite3_prepare_v2(db, "select 0 match 0", -1, &st, 0), ours = rc != SQLITE_OK;
  if (st) ours = sqlite3_step(st) == SQLITE_ERROR && !strcmp(sqlite3_errmsg(db), VX_MATCH_STANDIN);
  sqlite3_finalize(st);
  if (!ours) return SQLITE_OK;
  return sqlite3_create_function_v2(db, "match", 2, SQLITE_UTF8 | SQLITE_INNOCUOUS, 0, match_func,
                                    0, 0, 0);
}
