/*
** darts-clone's double-array trie, read in place: the structure sentencepiece keeps a
** normalizer's charsmap in, and the one hybridsql/embedding/darts.py builds for the Unigram
** tokenizer's pieces (its docstring describes the units).  Header only, static inline.
**
** The units are 32-bit little-endian words at any alignment (read through memcpy).  Every index
** is checked against the count, so a trie of any bytes is read without reading past its end: a
** damaged trie finds wrong keys, never a crash.  A key stops at a zero byte, as
** spm_precompiled's search does.
*/
#ifndef HYBRIDSQL_DARTS_H
#define HYBRIDSQL_DARTS_H
#include <stdint.h>
#include <string.h>

typedef struct HsDarts {
  const uint8_t *units;
  uint64_t n; /* units */
} HsDarts;

static inline uint32_t hs_darts_unit(const HsDarts *d, uint64_t pos) {
  uint32_t u = 0;
  if (pos < d->n) memcpy(&u, d->units + 4 * pos, 4);
  return u;
}

static inline uint64_t hs_darts_offset(uint32_t u) {
  return (uint64_t)(u >> 10) << ((u & (1u << 9)) >> 6);
}

/* A walk along a key from the root, one byte at a time. */
typedef struct HsDartsWalk {
  uint64_t pos; /* the children's base of the node reached */
} HsDartsWalk;

static inline void hs_darts_start(const HsDarts *d, HsDartsWalk *w) {
  w->pos = hs_darts_offset(hs_darts_unit(d, 0));
}

/* Steps along byte c: 0 when the trie has no such key prefix (the walk is over), else 1, with
** *value the value of the key that ends there, or -1 when none does. */
static inline int hs_darts_step(const HsDarts *d, HsDartsWalk *w, uint8_t c, int64_t *value) {
  uint32_t u;
  if (c == 0) return 0;
  w->pos ^= c;
  if (w->pos >= d->n) return 0;
  u = hs_darts_unit(d, w->pos);
  if ((u & ((1u << 31) | 0xFF)) != c) return 0;
  w->pos ^= hs_darts_offset(u);
  *value = (u >> 8) & 1 ? (int64_t)(hs_darts_unit(d, w->pos) & 0x7FFFFFFFu) : -1;
  return 1;
}

/* The value of the shortest key that p[0..n) starts with (tokenizers' Precompiled takes the
** first of its common prefix search), its length in *len; -1 when none. */
static inline int64_t hs_darts_shortest(const HsDarts *d, const uint8_t *p, uint64_t n,
                                        uint64_t *len) {
  HsDartsWalk w;
  int64_t value;
  uint64_t i;
  hs_darts_start(d, &w);
  for (i = 0; i < n; i++) {
    if (!hs_darts_step(d, &w, p[i], &value)) return -1;
    if (value >= 0) {
      *len = i + 1;
      return value;
    }
  }
  return -1;
}

/* The value of the key p[0..n) exactly, -1 when it is not one. */
static inline int64_t hs_darts_exact(const HsDarts *d, const uint8_t *p, uint64_t n) {
  HsDartsWalk w;
  int64_t value = -1;
  uint64_t i;
  hs_darts_start(d, &w);
  for (i = 0; i < n; i++)
    if (!hs_darts_step(d, &w, p[i], &value)) return -1;
  return n ? value : -1;
}

#endif
