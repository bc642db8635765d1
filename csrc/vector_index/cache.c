/*
** The per-connection cache of blocks' records (Cache in internal.h): a block read twice at the
** same nonce is kept, in 2 MiB regions advised for huge pages (Pool), and used while its nonce,
** count, dims and capacity are those of the block list a query reads; block_records gives a
** query a block's records from the cache or read now, checked against its checksum.
*/
#include "vector_index/internal.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(_WIN32)
#include <malloc.h> /* _aligned_malloc */
#endif
#include <stdlib.h>
#include <string.h>

#define HS_REGION ((size_t)2 << 20)

/* Memory aligned to align (a power of two), freed by region_free() alone. */
static void *region_alloc(size_t align, size_t size) {
#if defined(_WIN32)
  return _aligned_malloc(size, align);
#else
  void *p = 0;
  return posix_memalign(&p, align, size) == 0 ? p : 0;
#endif
}

static void region_free(void *p) {
#if defined(_WIN32)
  _aligned_free(p);
#else
  free(p);
#endif
}

static uint8_t *pool_get(Pool *p, size_t bytes, int full) {
  if (!full || (p->slot && bytes != p->slot)) return malloc(bytes);
  p->slot = bytes;
  if (p->nfree == 0) {
    size_t per = HS_REGION >= 8 * bytes ? HS_REGION / bytes : 8, size = per * bytes;
    size = (size + HS_REGION - 1) / HS_REGION * HS_REGION;
    p->region = size;
    void *region = 0;
    uint8_t **regions = realloc(p->regions, sizeof(*regions) * (size_t)(p->nregions + 1));
    if (!regions) return 0;
    p->regions = regions;
    if ((int64_t)per > p->capfree) {
      uint8_t **grown = realloc(p->free, sizeof(*grown) * per);
      if (!grown) return 0;
      p->free = grown, p->capfree = (int64_t)per;
    }
    if (!(region = region_alloc(HS_REGION, size))) return 0;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(region, size, MADV_HUGEPAGE); /* advice only: a refusal changes nothing */
#endif
    p->regions[p->nregions++] = region;
    for (size_t i = 0; i < per; i++) p->free[p->nfree++] = (uint8_t *)region + i * bytes;
  }
  return p->free[--p->nfree];
}

static int pool_owns(const Pool *p, const uint8_t *buf) {
  for (int64_t i = 0; i < p->nregions; i++) {
    if (buf >= p->regions[i] && buf < p->regions[i] + p->region) return 1;
  }
  return 0;
}

void pool_put(Pool *p, uint8_t *buf) {
  if (!buf) return;
  if (!pool_owns(p, buf)) {
    free(buf);
    return;
  }
  if (p->nfree == p->capfree) {
    int64_t cap = p->capfree ? 2 * p->capfree : 64;
    uint8_t **grown = realloc(p->free, sizeof(*grown) * (size_t)cap);
    if (!grown) return; /* the slot stays unused until the cache goes */
    p->free = grown, p->capfree = cap;
  }
  p->free[p->nfree++] = buf;
}

static void pool_clear(Pool *p) {
  for (int64_t i = 0; i < p->nregions; i++) region_free(p->regions[i]);
  free(p->regions);
  free(p->free);
  memset(p, 0, sizeof(*p));
}

/* ---- the cache of records ---- */

void cache_clear(Cache *c) {
  for (int64_t i = 0; i < c->n; i++) pool_put(&c->pool, c->b[i].buf);
  free(c->b);
  free(c->scratch);
  map_free(&c->at);
  map_free(&c->seen);
  pool_clear(&c->pool);
  memset(c, 0, sizeof(*c));
}

static CBlock *cache_find(Cache *c, int64_t id) {
  int64_t i;
  return map_find(&c->at, id, &i) ? &c->b[i] : 0;
}

/* Rebuilds the index after entries were removed. */
static int cache_reindex(Cache *c) {
  map_free(&c->at);
  for (int64_t i = 0; i < c->n; i++) {
    if (!map_put(&c->at, c->b[i].id, i)) return 0;
  }
  return 1;
}

/* Drops the entries `drop` says to, by position. */
static int cache_drop(Cache *c, int (*drop)(const CBlock *, void *), void *arg) {
  int64_t m = 0;
  for (int64_t i = 0; i < c->n; i++) {
    if (drop(&c->b[i], arg)) {
      c->bytes -= c->b[i].bytes;
      pool_put(&c->pool, c->b[i].buf);
    } else {
      c->b[m++] = c->b[i];
    }
  }
  int changed = m != c->n;
  c->n = m;
  return !changed || cache_reindex(c);
}

static int older_than(const CBlock *b, void *arg) { return b->used < *(uint64_t *)arg; }

/*
** Keeps buf (malloc'd: the `count` records of block `id` at `nonce`) in the
** cache, making room by dropping the blocks unused the longest; frees buf when
** there is no room because this query uses every cached block.  A caller
** never holds a CBlock across this call.
*/
void cache_keep(Cache *c, const BlockRef *r, size_t bytes, uint8_t *buf) {
  int64_t id = r->id;
  CBlock *e = cache_find(c, id);
  if (!e) {
    while (c->bytes + bytes > HS_CACHE_BYTES) {
      uint64_t cut = c->clock;
      for (int64_t i = 0; i < c->n; i++) {
        if (c->b[i].used < cut) cut = c->b[i].used;
      }
      cut++;
      if (cut > c->clock || !cache_drop(c, older_than, &cut)) {
        pool_put(&c->pool, buf);
        return;
      }
    }
    if (c->n == c->cap) {
      int64_t cap = c->cap ? 2 * c->cap : 64;
      CBlock *grown = realloc(c->b, sizeof(CBlock) * (size_t)cap);
      if (!grown) {
        pool_put(&c->pool, buf);
        return;
      }
      c->b = grown, c->cap = cap;
    }
    if (!map_put(&c->at, id, c->n)) {
      pool_put(&c->pool, buf);
      return;
    }
    e = &c->b[c->n++];
  } else {
    c->bytes -= e->bytes;
    pool_put(&c->pool, e->buf);
  }
  e->id = id, e->nonce = r->nonce, e->count = r->count, e->dims = r->dims;
  e->capacity = r->capacity, e->bytes = bytes, e->buf = buf;
  e->used = c->clock;
  c->bytes += bytes;
}

static int not_in(const CBlock *b, void *arg) { return !map_find(arg, b->id, 0); }

/* Forgets cached blocks that no longer exist (deleted ones), every HS_SWEEP_EVERY queries. */
int cache_sweep(VxTab *t) {
  Cache *c = &t->cache;
  if (c->n == 0 || ++c->sweep < HS_SWEEP_EVERY) return SQLITE_OK;
  c->sweep = 0;
  char *sql = sqlite3_mprintf("select id from \"%w\".\"%w_blocks\"", t->schema, t->name);
  sqlite3_stmt *st = 0;
  int rc = sql ? sqlite3_prepare_v2(t->db, sql, -1, &st, 0) : SQLITE_NOMEM;
  sqlite3_free(sql);
  I64Map live = {0};
  while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (!map_put(&live, sqlite3_column_int64(st, 0), 0)) rc = SQLITE_NOMEM;
    else rc = SQLITE_OK;
  }
  if (rc == SQLITE_DONE) {
    rc = cache_drop(c, not_in, &live) ? SQLITE_OK : SQLITE_NOMEM;
    map_free(&c->seen); /* forgets deleted blocks; the others are kept at their next read */
  }
  else if (rc != SQLITE_NOMEM) rc = vx_sql_fail(t, rc);
  sqlite3_finalize(st);
  map_free(&live);
  return rc;
}

/* What a query reads of block r: its rows' records, and its numeric metadata if it has any;
** in format 3 the whole row, which its checksum covers. */
int64_t read_bytes(const VxTab *t, const BlockRef *r) {
  return t->nnum || t->format >= 3 ? block_bytes(t, r->capacity, r->dims)
                                   : r->count * rec_stride(r->dims);
}

/*
** The records of block r: from the cache, or read now.  A block is kept in the
** cache the second time a query reads it at the same nonce (then *fresh is set
** and the caller keeps buf once it has scanned it); the first time, it is read
** into a scratch buffer.  So a connection that asks once, as every command-line
** process does, does not pay to fill a cache (most of that is the page faults
** of new memory), and a block that changes at every write is not cached at all.
** *read: buf was read from the file now (not taken from the cache).
*/
int block_records(VxTab *t, const BlockRef *r, sqlite3_blob **h, uint8_t **buf,
                  int *fresh, int *read) {
  Cache *c = &t->cache;
  CBlock *e = cache_find(c, r->id);
  *fresh = *read = 0;
  if (e && e->nonce == r->nonce && e->count == r->count && e->dims == r->dims &&
      e->capacity == r->capacity) {
    e->used = c->clock;
    *buf = e->buf;
    return SQLITE_OK;
  }
  int64_t bytes = read_bytes(t, r), seen;
  int keep = map_find(&c->seen, r->id, &seen) && seen == r->nonce;
  if (keep) {
    *buf = pool_get(&c->pool, (size_t)bytes, r->count == vx_layout(t, r->dims)->rows);
  } else {
    if ((size_t)bytes > c->scratch_cap) {
      free(c->scratch);
      c->scratch_cap = 0;
      if ((c->scratch = malloc((size_t)bytes))) c->scratch_cap = (size_t)bytes;
    }
    *buf = c->scratch;
    if (*buf && !map_put(&c->seen, r->id, r->nonce)) *buf = 0;
  }
  if (!*buf) return SQLITE_NOMEM;
  *read = 1;
  int rc = vx_blob(t, h, "codes", r->id, 0);
  if (rc == SQLITE_OK) rc = vx_codes_length(t, *h, r);
  if (rc == SQLITE_OK) rc = vx_blob_read(t, *h, *buf, bytes, 0, "codes", r->id);
  if (rc == SQLITE_OK) rc = vx_verify(t, r, *buf, bytes);
  if (rc && keep) pool_put(&c->pool, *buf);
  if (rc) *buf = 0;
  *fresh = rc == SQLITE_OK && keep;
  return rc;
}
