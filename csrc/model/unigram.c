/*
** The SentencePiece Unigram tokenizer: csrc/model/unigram.h is the contract.  It gives the ids
** the tokenizers library (0.23) gives for a tokenizer.json of type Unigram whose normalizer is a
** Sequence of Precompiled, Replace(Regex " {2,}") and Strip, whose pre-tokenizer is Metaspace,
** and whose added tokens are not normalized: XLM-R's, as multilingual-e5-small and
** paraphrase-multilingual-MiniLM-L12-v2 ship it.
**
** The section (hybridsql/embedding/tokenizer_section.py writes it; little-endian):
**
**   0   u32 version (1)            4   u32 n: pieces, ids 0 .. n-1 in the tokenizer.json's order
**   8   i32 unk, cls, sep, pad, mask: ids, -1 for none (unk is needed)
**   28  u32 flags: bits 0-1 Metaspace's prepend_scheme (0 always, 1 first, 2 never); bit 2 split
**   32  u32 Metaspace's replacement (a code point: U+2581)
**   36  u32 k, then 40 u8 steps[8]: the normalizer's steps in order, k of them (STEP_*)
**   48  u64 offset of the scores, f64[n]
**   56  u64 offset of the pieces' double-array trie (csrc/model/darts.h), 64 u64 its units;
**       each piece's bytes map to its id (the last id of a repeated piece, as tokenizers' map)
**   72  u64 offset of the charsmap, 80 u64 its bytes: the Precompiled normalizer's
**       precompiled_charsmap as is (u32 trie bytes, the trie, the NUL-ended replacements)
**   88  u64 offset of the added tokens, 96 u32 their count, 100 u32 zero; each token: u32 id,
**       u32 flags (bit 0 lstrip, bit 1 rstrip), u32 length, its bytes padded to 4
**
** A text is read in these steps (requirement numbers are cited below):
**
**   1. Invalid UTF-8 becomes U+FFFD over each maximal subpart, as Python's bytes.decode(
**      "utf-8", "replace") reads it (a str is what tokenizers is given).
**   2. The added tokens (<s> <pad> </s> <unk> <mask>) are found in that text, leftmost first and
**      the longest there, as tokenizers' AddedVocabulary finds them; each is its own id.  An
**      lstrip token takes the White_Space before it, an rstrip one that after it.  Between them,
**      each stretch of text is read alone (3 to 6); tokenizers drops one that step 3 empties.
**   3. The normalizer's steps, in order.  Precompiled, as tokenizers' normalizers/precompiled.rs:
**      the text is cut into extended grapheme clusters (UAX #29, csrc/model/grapheme_tables.h);
**      a cluster under 6 bytes whose bytes start with a key of the charsmap is replaced whole by
**      the replacement of the SHORTEST such key; any other cluster, code point by code point,
**      each by the replacement of the shortest key its bytes start with, or kept.  (So
**      "e" U+0301 U+0301 is "é", one mark lost, as tokenizers and the model's training have
**      it; sentencepiece takes the longest key over the whole text instead.)  Replace turns each
**      run of two spaces or more into one space (or the replacement); Strip removes White_Space
**      from the start, the end or both.
**   4. Metaspace: every space becomes the replacement (U+2581, "▁"); one is put in front unless
**      the text starts with it ("always"; "first": only at the text's start; "never"); with
**      split, a word starts at each replacement.
**   5. Each word, alone: the best segmentation into pieces (Viterbi) by the sum of their scores
**      in double precision, as tokenizers' encode_optimized: at each code point every piece its
**      bytes start with (shorter first) and, when no piece is that one code point, an unknown
**      piece of it scored min(scores) - 10; a later candidate replaces the best one only when
**      strictly better.  A run of unknown pieces (and the <unk> piece itself) becomes one piece:
**      the id of its bytes if a piece spells them, else <unk>.
*/
#include "unigram.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "darts.h"
#include "grapheme_tables.h"

#define HEADER_BYTES 104
#define MAX_STEPS 8
#define STEP_PRECOMPILED 1
#define STEP_SPACES 2        /* Replace(Regex " {2,}", " ") */
#define STEP_SPACES_META 3   /* Replace(Regex " {2,}", the replacement) */
#define STEP_STRIP_LEFT 4
#define STEP_STRIP_RIGHT 5
#define STEP_STRIP_BOTH 6
#define PREPEND_ALWAYS 0
#define PREPEND_FIRST 1
#define PREPEND_NEVER 2
#define FLAG_SPLIT 4u
#define ADDED_LSTRIP 1u
#define ADDED_RSTRIP 2u
#define UNK_PENALTY 10.0 /* tokenizers' K_UNK_PENALTY */
#define CLUSTER_WHOLE 6  /* a cluster under this many bytes is looked up whole */

typedef struct Added {
  int32_t id;
  uint32_t flags;
  const uint8_t *bytes;
  uint32_t len;
} Added;

struct HsUnigram {
  int32_t n;
  int32_t special[5]; /* HS_UNIGRAM_UNK .. HS_UNIGRAM_MASK */
  uint32_t flags;
  uint8_t repl[4]; /* the replacement's UTF-8 */
  int repl_len;
  uint8_t steps[MAX_STEPS];
  int nsteps;
  const uint8_t *scores; /* f64[n] */
  double unk_score;
  HsDarts pieces;
  HsDarts chars; /* the charsmap's trie; n 0 when there is none */
  const uint8_t *norm;
  uint64_t norm_len;
  Added *added;
  int nadded;
  uint8_t added_first[32]; /* a bit for each byte an added token starts with */
};

/* ------------------------------------------------------------------------------------------ */
/* Opening a section: every offset and count checked against its length before it is used */

static uint32_t le_u32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

static uint64_t le_u64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

static double score_of(const HsUnigram *u, int32_t id) {
  double v;
  memcpy(&v, u->scores + 8 * (size_t)id, 8);
  return v;
}

/* Whether p[0..n) is valid UTF-8 (NUL bytes included). */
static int valid_utf8(const uint8_t *p, uint64_t n) {
  const uint8_t *end = p + n;
  while (p < end) {
    uint32_t c;
    int step = hs_utf8_next(p, end, &c);
    if (c == 0xFFFD && !(step == 3 && p[0] == 0xEF && p[1] == 0xBF && p[2] == 0xBD)) return 0;
    p += step;
  }
  return 1;
}

/* Whether [at, at + size) lies within len bytes. */
static int within(uint64_t at, uint64_t size, int64_t len) {
  return at <= (uint64_t)len && size <= (uint64_t)len - at;
}

static HsUnigram *bad_section(HsUnigram *u, char *err, size_t errcap, const char *why) {
  if (err && errcap) snprintf(err, errcap, "the Unigram tokenizer's section %s", why);
  hs_unigram_free(u);
  return NULL;
}

HsUnigram *hs_unigram_open(const uint8_t *s, int64_t len, char *err, size_t errcap) {
  HsUnigram *u;
  uint64_t at, size, count, i;
  uint32_t repl;
  int k;
  if (!s || len < HEADER_BYTES)
    return bad_section(NULL, err, errcap, "is too short for its header");
  if (le_u32(s) != 1) return bad_section(NULL, err, errcap, "is not of version 1");
  u = calloc(1, sizeof(*u));
  if (!u) return bad_section(NULL, err, errcap, "cannot be read: no memory");
  u->n = (int32_t)le_u32(s + 4);
  if (le_u32(s + 4) == 0 || le_u32(s + 4) > INT32_MAX)
    return bad_section(u, err, errcap, "has no pieces");
  for (k = 0; k < 5; k++) {
    int32_t id = (int32_t)le_u32(s + 8 + 4 * k);
    if (id < -1 || id >= u->n || (k == HS_UNIGRAM_UNK && id < 0))
      return bad_section(u, err, errcap, "names a special piece that is not one of its pieces");
    u->special[k] = id;
  }
  u->flags = le_u32(s + 28);
  if ((u->flags & 3) > PREPEND_NEVER || u->flags >> 3)
    return bad_section(u, err, errcap, "has flags this version does not know");
  repl = le_u32(s + 32);
  if (repl == 0 || repl > 0x10FFFF || (repl >= 0xD800 && repl <= 0xDFFF))
    return bad_section(u, err, errcap, "has a replacement that is not a code point");
  u->repl_len = hs_utf8_put(repl, u->repl);
  u->nsteps = (int)le_u32(s + 36);
  if (le_u32(s + 36) > MAX_STEPS) return bad_section(u, err, errcap, "has over 8 normalizer steps");
  for (k = 0; k < MAX_STEPS; k++) {
    u->steps[k] = s[40 + k];
    if (k < u->nsteps ? u->steps[k] < 1 || u->steps[k] > STEP_STRIP_BOTH : u->steps[k] != 0)
      return bad_section(u, err, errcap, "has a normalizer step this version does not know");
  }
  at = le_u64(s + 48);
  if (!within(at, 8 * (uint64_t)u->n, len))
    return bad_section(u, err, errcap, "has its scores past its end");
  u->scores = s + at;
  u->unk_score = INFINITY;
  for (i = 0; i < (uint64_t)u->n; i++) {
    double v = score_of(u, (int32_t)i);
    if (!isfinite(v)) return bad_section(u, err, errcap, "has a score that is not a finite number");
    if (v < u->unk_score) u->unk_score = v;
  }
  u->unk_score -= UNK_PENALTY;
  at = le_u64(s + 56);
  count = le_u64(s + 64);
  if (count == 0 || count > ((uint64_t)1 << 40) || !within(at, 4 * count, len))
    return bad_section(u, err, errcap, "has its pieces' trie past its end");
  u->pieces.units = s + at;
  u->pieces.n = count;
  at = le_u64(s + 72);
  size = le_u64(s + 80);
  if (!within(at, size, len)) return bad_section(u, err, errcap, "has its charsmap past its end");
  if (size) {
    uint32_t trie = size >= 4 ? le_u32(s + at) : 0;
    if (size < 4 || trie < 4 || trie % 4 || trie > size - 4)
      return bad_section(u, err, errcap, "has a charsmap whose trie is not within it");
    u->chars.units = s + at + 4;
    u->chars.n = trie / 4;
    u->norm = s + at + 4 + trie;
    u->norm_len = size - 4 - trie;
    if (!valid_utf8(u->norm, u->norm_len))
      return bad_section(u, err, errcap, "has a charsmap whose replacements are not UTF-8");
  }
  for (k = 0; k < u->nsteps; k++)
    if (u->steps[k] == STEP_PRECOMPILED && !size)
      return bad_section(u, err, errcap, "has a Precompiled step and no charsmap");
  at = le_u64(s + 88);
  count = le_u32(s + 96);
  if (!within(at, 12 * count, len))
    return bad_section(u, err, errcap, "has its added tokens past its end");
  u->added = calloc(count ? count : 1, sizeof(Added));
  if (!u->added) return bad_section(u, err, errcap, "cannot be read: no memory");
  for (i = 0; i < count; i++) {
    Added *a = &u->added[i];
    if (!within(at, 12, len))
      return bad_section(u, err, errcap, "has its added tokens past its end");
    a->id = (int32_t)le_u32(s + at);
    a->flags = le_u32(s + at + 4);
    a->len = le_u32(s + at + 8);
    if (a->id < 0 || a->id >= u->n || a->flags > 3 || a->len == 0 ||
        !within(at + 12, a->len, len) || !valid_utf8(s + at + 12, a->len) ||
        memchr(s + at + 12, 0, a->len))
      return bad_section(u, err, errcap, "has an added token that is not one");
    a->bytes = s + at + 12;
    u->added_first[a->bytes[0] >> 3] |= (uint8_t)(1u << (a->bytes[0] & 7));
    at += 12 + ((uint64_t)a->len + 3) / 4 * 4;
    u->nadded++;
  }
  return u;
}

void hs_unigram_free(HsUnigram *u) {
  if (!u) return;
  free(u->added);
  free(u);
}

int32_t hs_unigram_size(const HsUnigram *u) {
  return u->n;
}

int32_t hs_unigram_special(const HsUnigram *u, int which) {
  return which >= 0 && which < 5 ? u->special[which] : -1;
}

int32_t hs_unigram_id(const HsUnigram *u, const uint8_t *p, int64_t n) {
  int64_t id = n > 0 ? hs_darts_exact(&u->pieces, p, (uint64_t)n) : -1;
  return id >= 0 && id < u->n ? (int32_t)id : -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Growing byte buffers */

typedef struct Buf {
  uint8_t *p;
  size_t n, cap;
  int nomem;
} Buf;

static int buf_room(Buf *b, size_t more) {
  if (b->nomem) return 0;
  if (b->n + more > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    uint8_t *grown;
    while (cap < b->n + more) cap *= 2;
    grown = realloc(b->p, cap);
    if (!grown) {
      b->nomem = 1;
      return 0;
    }
    b->p = grown;
    b->cap = cap;
  }
  return 1;
}

static void buf_add(Buf *b, const uint8_t *p, size_t n) {
  if (n && buf_room(b, n)) {
    memcpy(b->p + b->n, p, n);
    b->n += n;
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Requirement 3: the normalizer */

static uint8_t class_of(uint32_t c) {
  return hs_g_stage2[hs_g_stage1[c / HS_G_BLOCK] * HS_G_BLOCK + c % HS_G_BLOCK];
}

/* The code point at p of valid UTF-8 (p < end), its bytes in *n. */
static uint32_t decode(const uint8_t *p, const uint8_t *end, int *n) {
  uint32_t c;
  *n = hs_utf8_next(p, end, &c);
  return c;
}

/* UAX #29 as unicode-segmentation reads it (scripts/unicode_tables.py's breaks() is the same
** rules in Python): a cursor over a text's classes, which says where a cluster starts. */
typedef struct Cursor {
  int prev;  /* the previous code point's class; -1 at the start */
  int emoji; /* GB11: 1 after ExtPict Extend*, 2 after ExtPict Extend* ZWJ */
  int incb;  /* GB9c: 1 after a consonant [Extend Linker]*, 2 once a linker was among them */
} Cursor;

static int extend_class(int c) {
  return c == HS_G_EXTEND || c == HS_G_EXTEND_INCB || c == HS_G_LINKER;
}

/* Whether a cluster starts at a code point of class cur; moves the cursor past it. */
static int cluster_starts(Cursor *k, int cur) {
  int prev = k->prev, cut;
  if (prev < 0) cut = 1;
  else if (prev == HS_G_CR && cur == HS_G_LF) cut = 0;
  else if (prev == HS_G_CONTROL || prev == HS_G_CR || prev == HS_G_LF || cur == HS_G_CONTROL ||
           cur == HS_G_CR || cur == HS_G_LF)
    cut = 1;
  else if ((prev == HS_G_L &&
            (cur == HS_G_L || cur == HS_G_V || cur == HS_G_LV || cur == HS_G_LVT)) ||
           ((prev == HS_G_LV || prev == HS_G_V) && (cur == HS_G_V || cur == HS_G_T)) ||
           ((prev == HS_G_LVT || prev == HS_G_T) && cur == HS_G_T) || extend_class(cur) ||
           cur == HS_G_ZWJ || cur == HS_G_SPACINGMARK || prev == HS_G_PREPEND)
    cut = 0;
  else if (cur == HS_G_CONSONANT) cut = k->incb != 2;
  else cut = !(prev == HS_G_ZWJ && cur == HS_G_EXTPICT && k->emoji == 2);
  if (cur == HS_G_EXTPICT || (extend_class(cur) && k->emoji == 1)) k->emoji = 1;
  else k->emoji = cur == HS_G_ZWJ && k->emoji == 1 ? 2 : 0;
  if (cur == HS_G_CONSONANT) k->incb = 1;
  else if (cur == HS_G_LINKER) k->incb = k->incb ? 2 : 0;
  else if (cur != HS_G_EXTEND_INCB && cur != HS_G_ZWJ) k->incb = 0;
  k->prev = cur;
  return cut;
}

/* Appends the replacement of the shortest key p[0..n) starts with; 0 when none does. */
static int replaced(const HsUnigram *u, const uint8_t *p, size_t n, Buf *out) {
  uint64_t len;
  int64_t at = hs_darts_shortest(&u->chars, p, n, &len);
  const uint8_t *end;
  /* A replacement must start a code point of the replacements, all UTF-8 (checked at open), so
  ** that what is written stays UTF-8. */
  if (at < 0 || (uint64_t)at >= u->norm_len || (u->norm[at] & 0xC0) == 0x80) return 0;
  end = memchr(u->norm + at, 0, u->norm_len - (uint64_t)at);
  buf_add(out, u->norm + at, end ? (size_t)(end - (u->norm + at)) : u->norm_len - (uint64_t)at);
  return 1;
}

static void precompiled(const HsUnigram *u, const uint8_t *t, size_t n, Buf *out) {
  Cursor k = {-1, 0, 0};
  size_t at = 0;
  int step;
  if (n) cluster_starts(&k, class_of(decode(t, t + n, &step)) & 0x7F);
  while (at < n) {
    size_t end = at, q;
    /* The cluster: its first code point is the cursor's last; it ends where the next starts. */
    end += (size_t)step;
    while (end < n) {
      uint32_t c = decode(t + end, t + n, &step);
      if (cluster_starts(&k, class_of(c) & 0x7F)) break;
      end += (size_t)step;
    }
    if (!(end - at < CLUSTER_WHOLE && replaced(u, t + at, end - at, out)))
      for (q = at; q < end;) {
        int one;
        decode(t + q, t + end, &one);
        if (!replaced(u, t + q, (size_t)one, out)) buf_add(out, t + q, (size_t)one);
        q += (size_t)one;
      }
    at = end;
  }
}

/* Replace(Regex " {2,}", with): each run of two spaces or more becomes `with`. */
static void spaces(const uint8_t *t, size_t n, const uint8_t *with, size_t wlen, Buf *out) {
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    while (j < n && t[j] == ' ') j++;
    if (j - i >= 2) buf_add(out, with, wlen);
    else if (j > i) buf_add(out, t + i, 1);
    if (j < n) buf_add(out, t + j, 1);
    i = j + 1;
  }
}

static int white(uint32_t c) {
  return (class_of(c) & HS_G_WHITE) != 0;
}

/* The bytes of White_Space that t[0..n) starts with. */
static size_t white_prefix(const uint8_t *t, size_t n) {
  size_t i = 0;
  while (i < n) {
    int step;
    if (!white(decode(t + i, t + n, &step))) break;
    i += (size_t)step;
  }
  return i;
}

/* Where the White_Space that t[0..n) ends with starts. */
static size_t white_suffix(const uint8_t *t, size_t n) {
  size_t i = n;
  while (i > 0) {
    size_t start = i - 1;
    int step;
    while (start > 0 && (t[start] & 0xC0) == 0x80) start--;
    if (!white(decode(t + start, t + n, &step))) break;
    i = start;
  }
  return i;
}

/* The normalizer's steps over t[0..n), into *out (swapped with *spare along the way). */
static void normalize(const HsUnigram *u, const uint8_t *t, size_t n, Buf *out, Buf *spare) {
  int k;
  out->n = 0;
  buf_add(out, t, n);
  for (k = 0; k < u->nsteps && !out->nomem; k++) {
    Buf swap;
    size_t from = 0, to = out->n;
    spare->n = 0;
    switch (u->steps[k]) {
    case STEP_PRECOMPILED:
      precompiled(u, out->p, out->n, spare);
      break;
    case STEP_SPACES:
      spaces(out->p, out->n, (const uint8_t *)" ", 1, spare);
      break;
    case STEP_SPACES_META:
      spaces(out->p, out->n, u->repl, (size_t)u->repl_len, spare);
      break;
    default: /* Strip */
      if (u->steps[k] != STEP_STRIP_RIGHT) from = white_prefix(out->p, out->n);
      if (u->steps[k] != STEP_STRIP_LEFT) to = from + white_suffix(out->p + from, out->n - from);
      buf_add(spare, out->p + from, to - from);
    }
    spare->nomem |= out->nomem;
    swap = *out;
    *out = *spare;
    *spare = swap;
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Requirement 5: a word's pieces */

/* Scratch memory for the words of one text. */
typedef struct Lattice {
  double *score; /* [m + 1] the best path's score to each place */
  int32_t *from; /* where its last piece starts; -1 when no path reaches it yet */
  int32_t *id;   /* that piece's id */
  int32_t *ends; /* the best path's places, front to back */
  size_t cap;
  int nomem;
} Lattice;

static int lattice_room(Lattice *l, size_t m) {
  if (m + 1 > l->cap) {
    size_t cap = (m + 1) * 2;
    double *score = realloc(l->score, sizeof(double) * cap);
    if (score) l->score = score;
    int32_t *from = realloc(l->from, sizeof(int32_t) * cap);
    if (from) l->from = from;
    int32_t *id = realloc(l->id, sizeof(int32_t) * cap);
    if (id) l->id = id;
    int32_t *ends = realloc(l->ends, sizeof(int32_t) * cap);
    if (ends) l->ends = ends;
    if (!score || !from || !id || !ends) {
      l->nomem = 1;
      return 0;
    }
    l->cap = cap;
  }
  return 1;
}

static void reach(Lattice *l, size_t at, double score, size_t from, int32_t id) {
  if (l->from[at] < 0 || score > l->score[at]) {
    l->score[at] = score;
    l->from[at] = (int32_t)from;
    l->id[at] = id;
  }
}

static void word(const HsUnigram *u, const uint8_t *w, size_t m, Lattice *l, HsIds *o) {
  int32_t unk = u->special[HS_UNIGRAM_UNK];
  size_t s, e, count = 0, i;
  if (m == 0 || m > INT32_MAX / 2 || !lattice_room(l, m)) {
    if (m) o->nomem = 1;
    return;
  }
  for (i = 0; i <= m; i++) l->from[i] = -1;
  l->score[0] = 0;
  for (s = 0; s < m;) {
    HsDartsWalk walk;
    int64_t value;
    int len, single = 0;
    double base = l->score[s];
    decode(w + s, w + m, &len);
    hs_darts_start(&u->pieces, &walk);
    for (e = s; e < m && hs_darts_step(&u->pieces, &walk, w[e], &value); e++) {
      if (value < 0 || value >= u->n) continue;
      reach(l, e + 1, base + score_of(u, (int32_t)value), s, (int32_t)value);
      single |= e + 1 - s == (size_t)len;
    }
    if (!single) reach(l, s + (size_t)len, base + u->unk_score, s, unk);
    s += (size_t)len;
  }
  /* The path's places, front to back; then its pieces, a run of unknown ones as one. */
  for (e = m; e > 0; e = (size_t)l->from[e]) count++;
  l->ends[0] = 0;
  for (i = count, e = m; e > 0; e = (size_t)l->from[e]) l->ends[i--] = (int32_t)e;
  for (i = 1; i <= count && o->n < o->limit;) {
    size_t j = i;
    int32_t id = l->id[l->ends[i]];
    if (id == unk) {
      while (j + 1 <= count && l->id[l->ends[j + 1]] == unk) j++;
      id = hs_unigram_id(u, w + l->ends[i - 1], l->ends[j] - l->ends[i - 1]);
      if (id < 0) id = unk;
    }
    hs_ids_add(o, id);
    i = j + 1;
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Requirements 2 and 4: a text's stretches between added tokens, and their words */

typedef struct Scratch {
  Buf norm, spare;
  Lattice lattice;
} Scratch;

/* Whether t[0..n) starts with the replacement. */
static int starts_with(const uint8_t *t, size_t n, const HsUnigram *u) {
  return n >= (size_t)u->repl_len && !memcmp(t, u->repl, (size_t)u->repl_len);
}

/* Metaspace and the words of one stretch t[0..n) of the text (at its start when first). */
static void stretch(const HsUnigram *u, const uint8_t *t, size_t n, int first, Scratch *x,
                    HsIds *o) {
  Buf *b = &x->spare;
  size_t i, start;
  int prepend;
  normalize(u, t, n, &x->norm, &x->spare);
  if (x->norm.nomem || x->spare.nomem) {
    o->nomem = 1;
    return;
  }
  if (x->norm.n == 0) return; /* tokenizers drops an empty stretch */
  b->n = 0;
  switch (u->flags & 3) {
  case PREPEND_ALWAYS: prepend = 1; break;
  case PREPEND_FIRST: prepend = first; break;
  default: prepend = 0;
  }
  if (prepend && !(x->norm.p[0] == ' ' || starts_with(x->norm.p, x->norm.n, u)))
    buf_add(b, u->repl, (size_t)u->repl_len);
  for (i = 0; i < x->norm.n; i++) {
    if (x->norm.p[i] == ' ') buf_add(b, u->repl, (size_t)u->repl_len);
    else buf_add(b, x->norm.p + i, 1);
  }
  if (b->nomem) {
    o->nomem = 1;
    return;
  }
  if (!(u->flags & FLAG_SPLIT)) {
    word(u, b->p, b->n, &x->lattice, o);
    return;
  }
  for (start = 0, i = 1; i <= b->n && o->n < o->limit && !o->nomem; i++)
    if (i == b->n || starts_with(b->p + i, b->n - i, u)) {
      word(u, b->p + start, i - start, &x->lattice, o);
      start = i;
    }
  if (x->lattice.nomem) o->nomem = 1;
}

/* The added token that starts at t[at] (the longest there), else NULL. */
static const Added *added_at(const HsUnigram *u, const uint8_t *t, size_t n, size_t at) {
  const Added *best = NULL;
  int k;
  if (!(u->added_first[t[at] >> 3] & (1u << (t[at] & 7)))) return NULL;
  for (k = 0; k < u->nadded; k++) {
    const Added *a = &u->added[k];
    if (a->len <= n - at && !memcmp(t + at, a->bytes, a->len) && (!best || a->len > best->len))
      best = a;
  }
  return best;
}

void hs_unigram_ids(const HsUnigram *u, const uint8_t *text, int64_t len, HsIds *o) {
  Scratch x;
  Buf clean = {0};
  size_t at, done = 0;
  int64_t i;
  memset(&x, 0, sizeof(x));
  /* Requirement 1 */
  for (i = 0; i < len;) {
    uint32_t c;
    int step = hs_utf8_next(text + i, text + len, &c);
    if (c == 0xFFFD) buf_add(&clean, (const uint8_t *)"\xEF\xBF\xBD", 3);
    else buf_add(&clean, text + i, (size_t)step);
    i += step;
  }
  if (clean.nomem) {
    o->nomem = 1;
    return;
  }
  /* Requirement 2 */
  for (at = 0; at < clean.n && o->n < o->limit && !o->nomem;) {
    const Added *a = u->nadded ? added_at(u, clean.p, clean.n, at) : NULL;
    size_t start = at, stop;
    if (!a) {
      at++;
      continue;
    }
    stop = at + a->len;
    if (a->flags & ADDED_LSTRIP) {
      start = white_suffix(clean.p, at);
      if (start < done) start = done;
    }
    if (a->flags & ADDED_RSTRIP) stop += white_prefix(clean.p + stop, clean.n - stop);
    if (start > done) stretch(u, clean.p + done, start - done, done == 0, &x, o);
    if (o->n < o->limit) hs_ids_add(o, a->id);
    done = at = stop;
  }
  if (done < clean.n && o->n < o->limit && !o->nomem)
    stretch(u, clean.p + done, clean.n - done, done == 0, &x, o);
  free(clean.p);
  free(x.norm.p);
  free(x.spare.p);
  free(x.lattice.score);
  free(x.lattice.from);
  free(x.lattice.id);
  free(x.lattice.ends);
}
