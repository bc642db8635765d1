/*
** What both tokenizers share (csrc/model/tokenizer.c's WordPiece, csrc/model/unigram.c's
** Unigram): UTF-8 read as Python reads it, and the ids a tokenizer writes.  Header only, static
** inline: each file gets its own copy, and the amalgamation one.
*/
#ifndef HYBRIDSQL_TEXT_H
#define HYBRIDSQL_TEXT_H
#include <stdint.h>

/* Decodes the code point at p (p < end) into *cp and returns its bytes; an invalid sequence is
** U+FFFD over the bytes Python's bytes.decode("utf-8", "replace") replaces with one: the
** longest start of a valid sequence, at least one byte. */
static inline int hs_utf8_next(const uint8_t *p, const uint8_t *end, uint32_t *cp) {
  uint8_t b = p[0], lo = 0x80, hi = 0xBF;
  uint32_t c;
  int need, i;
  if (b < 0x80) {
    *cp = b;
    return 1;
  }
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
    c = b & 0x1F;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    c = b & 0x0F;
    if (b == 0xE0) lo = 0xA0;      /* overlong */
    else if (b == 0xED) hi = 0x9F; /* surrogates */
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    c = b & 0x07;
    if (b == 0xF0) lo = 0x90;      /* overlong */
    else if (b == 0xF4) hi = 0x8F; /* over U+10FFFF */
  } else {
    *cp = 0xFFFD;
    return 1;
  }
  for (i = 1; i <= need; i++) {
    if (p + i >= end || p[i] < lo || p[i] > hi) {
      *cp = 0xFFFD;
      return i;
    }
    c = (c << 6) | (p[i] & 0x3F);
    lo = 0x80;
    hi = 0xBF;
  }
  *cp = c;
  return need + 1;
}

/* Writes c as UTF-8 into out (4 bytes of room); returns the bytes written. */
static inline int hs_utf8_put(uint32_t c, uint8_t *out) {
  if (c < 0x80) {
    out[0] = (uint8_t)c;
    return 1;
  }
  if (c < 0x800) {
    out[0] = (uint8_t)(0xC0 | (c >> 6));
    out[1] = (uint8_t)(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    out[0] = (uint8_t)(0xE0 | (c >> 12));
    out[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
    out[2] = (uint8_t)(0x80 | (c & 0x3F));
    return 3;
  }
  out[0] = (uint8_t)(0xF0 | (c >> 18));
  out[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
  out[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
  out[3] = (uint8_t)(0x80 | (c & 0x3F));
  return 4;
}

/* The ids a tokenizer finds: written while under cap, counted up to limit (the caller stops
** reading once they are); nomem set when it ran out of memory. */
typedef struct HsIds {
  int32_t *ids;
  int64_t cap, n, limit;
  int nomem;
} HsIds;

static inline void hs_ids_add(HsIds *o, int32_t id) {
  if (o->n < o->cap) o->ids[o->n] = id;
  o->n++;
}

#endif
