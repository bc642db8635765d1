/*
** The embedding model's tokenizers behind one interface, and the WordPiece one itself:
** csrc/model/tokenizer.h is the contract.  hs_tokenizer_open reads a section of either kind
** (unigram.c reads a Unigram one); requirements 5 and 6 below, the windows, are every kind's.
** WordPiece gives the ids the tokenizers library gives for hybridsql/data/tokenizer.json, as
** LocalProvider reads a text:
**
**   1. Invalid UTF-8 is read as Python's bytes.decode("utf-8", "replace") reads it: each maximal
**      subpart of a valid sequence becomes one U+FFFD (which step 3 drops; it still counts as a
**      character in requirement 6).
**   2. The added tokens [PAD] [UNK] [CLS] [SEP] [MASK] (tokenizer.json's added_tokens: special,
**      not normalized) are found in the raw text first, leftmost first; each is its own id, and
**      the text between them is read as a text of its own.
**   3. BertNormalizer and BertPreTokenizer, one code point at a time, by the tables that
**      scripts/unicode_tables.py generates (csrc/unicode_tables.h, which says what each kind
**      does): dropped, white space (ends a word), a CJK ideograph or a punctuation character (a
**      word of its own), or the code points it adds to the word (its NFD without nonspacing marks,
**      lower-cased).  NFD's canonical reordering is applied to the marks that survive (their
**      classes are HS_UNI_CCC; a dropped mark of class 0 ends a run, HS_UNI_BARRIER).
**   4. WordPiece: a word of over 100 code points is [UNK]; else its longest piece from the start,
**      then the longest "##" piece from there, and so on; [UNK] alone for the whole word when no
**      piece fits at some point.
**   5. Windows: LocalProvider reads 256 tokens a window, [CLS] and [SEP] among them, so a window
**      holds HS_WINDOW_PIECES ids of the text; hs_tokenize gives those of the first `most`.
**      hs_tokenizer_ids takes the ids a window holds (`per`) from its caller, the model's.
**   6. What is read: encode_windows (hybridsql/windows.py) tokenizes a prefix of 512 characters a
**      window, cut before the first space, tab, line break or U+4E00..U+9FFF among the 256
**      characters from there (else there), then a prefix twice as long while the ids do not fill
**      more than `most` windows and the text goes on, up to 4096 characters a window.  This reads
**      the same prefixes, so a long text gives encode_windows' ids whatever its length.  A
**      prefix (hs_tokenizer_ids': a model's "query: ") is the text's start: its characters
**      count.  For Unigram, a cut before a CJK ideograph or at the bound can cut a word that
**      has no space in it (Chinese): the pieces just before the cut can then differ from the
**      whole text's, as they do in encode_windows with the tokenizers library, which this
**      follows; they are past the windows kept unless the prefix barely overfills them.
*/
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"
#include "unicode_tables.h"
#include "unigram.h"

#define HS_WINDOW_PIECES 254 /* LocalProvider.window less [CLS] and [SEP] */
#define HS_PREFIX_CHARS 4096 /* windows.py _PREFIX_CHARS */
#define HS_FIRST_CHARS 512   /* windows.py _FIRST_CHARS */
#define HS_CUT_REACH 256     /* how far windows.py _cut looks for a break */
#define HS_WORD_CHARS 100    /* tokenizer.json's max_input_chars_per_word */
#define WORDPIECE_HEADER 16  /* the WordPiece section's header (tokenizer.h) */
#define WORDPIECE_BERT_UNCASED 15u

/* tokenizer.json's added tokens, in the order of its list. */
static const char *const SPECIAL[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
#define N_SPECIAL ((int)(sizeof(SPECIAL) / sizeof(SPECIAL[0])))
/* Their roles, in the order of HS_TOKEN_CLS .. HS_TOKEN_MASK. */
static const char *const SPECIAL_ROLE[] = {"[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"};

typedef struct Edge {
  uint32_t key; /* parent node << 8 | byte; EMPTY_EDGE when free */
  int32_t child;
} Edge;
#define EMPTY_EDGE 0xFFFFFFFFu

/* What readable_share makes of a piece. */
#define SHARE_READABLE 0
#define SHARE_UNREADABLE 1
#define SHARE_UNCOUNTED 2 /* [CLS] [SEP] [PAD] */

struct HsVocab {
  int32_t n;         /* pieces */
  int32_t nodes;     /* nodes of the trie of pieces; node 0 is the root */
  int32_t *term;     /* [nodes]: the id of the piece that ends at the node, else -1 */
  Edge *edges;       /* open addressing, mask + 1 slots */
  uint32_t mask;
  int32_t root[256]; /* the root's children, -1 where none */
  int32_t cont;      /* the node of "##", -1 if no piece starts so */
  int32_t unk;
  int32_t special[N_SPECIAL]; /* ids of SPECIAL, -1 where the vocabulary lacks one */
  uint8_t *share;             /* [n]: SHARE_* */
};

/* ------------------------------------------------------------------------------------------ */
/* The vocabulary: a trie of the pieces' bytes, its edges in one hash table */

static uint32_t edge_slot(uint32_t key, uint32_t mask) {
  return (key * 0x9E3779B1u) & mask;
}

static int32_t child(const HsVocab *v, int32_t node, uint8_t byte) {
  uint32_t key, i;
  if (node == 0) return v->root[byte];
  key = (uint32_t)node << 8 | byte;
  for (i = edge_slot(key, v->mask);; i = (i + 1) & v->mask) {
    if (v->edges[i].key == key) return v->edges[i].child;
    if (v->edges[i].key == EMPTY_EDGE) return -1;
  }
}

/* Adds an edge; 0 when out of memory. */
static int add_edge(HsVocab *v, int32_t node, uint8_t byte, int32_t to) {
  uint32_t key = (uint32_t)node << 8 | byte, i;
  if (node == 0) {
    v->root[byte] = to;
    return 1;
  }
  if ((uint64_t)(v->nodes + 1) * 2 > (uint64_t)v->mask + 1) {
    uint32_t size = (v->mask + 1) * 2, j;
    Edge *grown = malloc(sizeof(Edge) * size);
    if (!grown) return 0;
    for (j = 0; j < size; j++) grown[j].key = EMPTY_EDGE;
    for (j = 0; j <= v->mask; j++) {
      if (v->edges[j].key == EMPTY_EDGE) continue;
      for (i = edge_slot(v->edges[j].key, size - 1); grown[i].key != EMPTY_EDGE;)
        i = (i + 1) & (size - 1);
      grown[i] = v->edges[j];
    }
    free(v->edges);
    v->edges = grown;
    v->mask = size - 1;
  }
  for (i = edge_slot(key, v->mask); v->edges[i].key != EMPTY_EDGE;) i = (i + 1) & v->mask;
  v->edges[i].key = key;
  v->edges[i].child = to;
  return 1;
}

/* The node the bytes p[0..n) lead to from `from`, -1 if none. */
static int32_t walk(const HsVocab *v, int32_t from, const char *p, size_t n) {
  size_t i;
  for (i = 0; i < n && from >= 0; i++) from = child(v, from, (uint8_t)p[i]);
  return from;
}

/* readable_share's verdict on a piece (windows.py): not counted for [CLS] [SEP] [PAD]; not
** readable for [UNK], for one character of _CJK_CHAR, for a "##" piece of at most 4 characters. */
static uint8_t share_of(const char *piece, size_t n) {
  size_t chars = 0, i;
  uint32_t c;
  if (!strcmp(piece, "[CLS]") || !strcmp(piece, "[SEP]") || !strcmp(piece, "[PAD]"))
    return SHARE_UNCOUNTED;
  if (!strcmp(piece, "[UNK]")) return SHARE_UNREADABLE;
  for (i = 0; i < n; i++) chars += ((uint8_t)piece[i] & 0xC0) != 0x80;
  if (chars == 1 && n > 1) {
    hs_utf8_next((const uint8_t *)piece, (const uint8_t *)piece + n, &c);
    if ((c >= 0x2E80 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7AF) ||
        (c >= 0xF900 && c <= 0xFAFF) || (c >= 0xFF00 && c <= 0xFFEF))
      return SHARE_UNREADABLE;
  }
  if (n >= 2 && piece[0] == '#' && piece[1] == '#' && chars <= 4) return SHARE_UNREADABLE;
  return SHARE_READABLE;
}

HsVocab *hs_vocab_new(const char *blob, int64_t len, int32_t n) {
  HsVocab *v;
  int64_t at = 0;
  int32_t id;
  int k;
  if (!blob || len <= 0 || n <= 0) return NULL;
  v = calloc(1, sizeof(*v));
  if (!v) return NULL;
  v->n = n;
  v->nodes = 1;
  v->mask = 1023;
  v->term = malloc(sizeof(int32_t) * (size_t)(len + 1)); /* a node per byte at most */
  v->edges = malloc(sizeof(Edge) * (v->mask + 1));
  v->share = malloc((size_t)n);
  if (!v->term || !v->edges || !v->share) goto fail;
  v->term[0] = -1;
  memset(v->root, 0xFF, sizeof(v->root));
  for (uint32_t i = 0; i <= v->mask; i++) v->edges[i].key = EMPTY_EDGE;
  for (id = 0; id < n; id++) {
    const char *piece = blob + at, *nul;
    int32_t node = 0;
    if (at >= len || !(nul = memchr(piece, 0, (size_t)(len - at)))) goto fail;
    for (const char *p = piece; p < nul; p++) {
      int32_t next = child(v, node, (uint8_t)*p);
      if (next < 0) {
        next = v->nodes;
        if (!add_edge(v, node, (uint8_t)*p, next)) goto fail;
        v->term[v->nodes++] = -1;
      }
      node = next;
    }
    if (node != 0 && v->term[node] < 0) v->term[node] = id; /* a repeated piece: the first */
    v->share[id] = share_of(piece, (size_t)(nul - piece));
    at = nul - blob + 1;
  }
  if (at != len) goto fail;
  v->cont = walk(v, 0, "##", 2);
  v->unk = hs_vocab_id(v, "[UNK]");
  if (v->unk < 0) goto fail;
  for (k = 0; k < N_SPECIAL; k++) v->special[k] = hs_vocab_id(v, SPECIAL[k]);
  return v;
fail:
  hs_vocab_free(v);
  return NULL;
}

void hs_vocab_free(HsVocab *v) {
  if (!v) return;
  free(v->term);
  free(v->edges);
  free(v->share);
  free(v);
}

int32_t hs_vocab_id(const HsVocab *v, const char *piece) {
  int32_t node;
  if (!v || !piece || !*piece) return -1;
  node = walk(v, 0, piece, strlen(piece));
  return node < 0 ? -1 : v->term[node];
}

double hs_readable_share(const HsVocab *v, const int32_t *ids, int64_t n) {
  int64_t counted = 0, unreadable = 0, i;
  for (i = 0; i < n; i++) {
    uint8_t share = ids[i] >= 0 && ids[i] < v->n ? v->share[ids[i]] : SHARE_UNREADABLE;
    if (share == SHARE_UNCOUNTED) continue;
    counted++;
    unreadable += share == SHARE_UNREADABLE;
  }
  return counted ? 1.0 - (double)unreadable / (double)counted : 1.0;
}

/* ------------------------------------------------------------------------------------------ */
/* Tokenizing (requirements 2 to 4) */

/* The word being read: its first HS_WORD_CHARS + 1 code points (one more says it is too long),
** each with its combining class (0 but for HS_UNI_CCC's marks). */
typedef struct Word {
  uint32_t cp[HS_WORD_CHARS + 1];
  uint8_t ccc[HS_WORD_CHARS + 1];
  int n;   /* code points so far */
  int run; /* where the run of marks that NFD may reorder starts */
} Word;

static uint8_t ccc_of(uint32_t c) {
  size_t lo = 0, hi = sizeof(HS_UNI_CCC) / sizeof(HS_UNI_CCC[0]);
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (HS_UNI_CCC[mid].cp == c) return HS_UNI_CCC[mid].ccc;
    if (HS_UNI_CCC[mid].cp < c) lo = mid + 1;
    else hi = mid;
  }
  return 0;
}

/* Adds c (of class ccc) to the word, moved before the marks of its run of a higher class. */
static void word_add(Word *w, uint32_t c, uint8_t ccc) {
  int i = w->n;
  if (w->n > HS_WORD_CHARS) return; /* [UNK] already; only its end is looked for */
  if (ccc)
    for (; i > w->run && w->ccc[i - 1] > ccc; i--) {
      w->cp[i] = w->cp[i - 1];
      w->ccc[i] = w->ccc[i - 1];
    }
  w->cp[i] = c;
  w->ccc[i] = ccc;
  w->n++;
  if (!ccc) w->run = w->n;
}

/* Requirement 4: the word's pieces, then an empty word. */
static void word_end(const HsVocab *v, Word *w, HsIds *o) {
  uint8_t bytes[HS_WORD_CHARS * 4];
  int32_t pieces[HS_WORD_CHARS];
  int len = 0, start = 0, count = 0, i;
  if (w->n == 0) return;
  if (w->n > HS_WORD_CHARS) {
    hs_ids_add(o, v->unk);
    w->n = w->run = 0;
    return;
  }
  for (i = 0; i < w->n; i++) len += hs_utf8_put(w->cp[i], bytes + len);
  w->n = w->run = 0;
  while (start < len) {
    int32_t node = start ? v->cont : 0, best = -1;
    int end = start;
    for (i = start; i < len && node >= 0; i++) {
      node = child(v, node, bytes[i]);
      if (node >= 0 && v->term[node] >= 0) {
        best = v->term[node];
        end = i + 1;
      }
    }
    if (best < 0) {
      hs_ids_add(o, v->unk);
      return;
    }
    pieces[count++] = best;
    start = end;
  }
  for (i = 0; i < count; i++) hs_ids_add(o, pieces[i]);
}

/* The id of the added token at p, else -1; *n its bytes. */
static int32_t special_at(const HsVocab *v, const uint8_t *p, const uint8_t *end, int *n) {
  int k;
  for (k = 0; k < N_SPECIAL; k++) {
    size_t len = strlen(SPECIAL[k]);
    if (v->special[k] >= 0 && (size_t)(end - p) >= len && !memcmp(p, SPECIAL[k], len)) {
      *n = (int)len;
      return v->special[k];
    }
  }
  return -1;
}

/* The ids of text[0..len), into o until o->limit are counted. */
static void tokenize(const HsVocab *v, const uint8_t *text, int64_t len, HsIds *o) {
  const uint8_t *p = text, *end = text + len;
  Word w;
  w.n = w.run = 0;
  while (p < end && o->n < o->limit) {
    uint32_t c;
    const HsUniRecord *r;
    int step, k;
    if (*p == '[') {
      int32_t id = special_at(v, p, end, &step);
      if (id >= 0) {
        word_end(v, &w, o);
        hs_ids_add(o, id);
        p += step;
        continue;
      }
    }
    step = hs_utf8_next(p, end, &c);
    p += step;
    r = &hs_uni_records[hs_uni_stage2[hs_uni_stage1[c / HS_UNI_BLOCK] * HS_UNI_BLOCK +
                                      c % HS_UNI_BLOCK]];
    switch (r->kind) {
    case HS_UNI_DROP:
      break;
    case HS_UNI_BARRIER:
      w.run = w.n;
      break;
    case HS_UNI_SPACE:
      word_end(v, &w, o);
      break;
    case HS_UNI_CJK:
    case HS_UNI_PUNCT:
      word_end(v, &w, o);
      if (r->n == HS_UNI_SELF) word_add(&w, c, 0);
      else
        for (k = 0; k < r->n; k++) word_add(&w, hs_uni_pool[r->off + k], 0);
      word_end(v, &w, o);
      break;
    case HS_UNI_HANGUL: { /* Unicode's algorithm, chapter 3.12 */
      uint32_t s = c - 0xAC00;
      word_add(&w, 0x1100 + s / 588, 0);
      word_add(&w, 0x1161 + s % 588 / 28, 0);
      if (s % 28) word_add(&w, 0x11A7 + s % 28, 0);
      break;
    }
    default: /* HS_UNI_WORD */
      if (r->n == HS_UNI_SELF) word_add(&w, c, r->marks ? ccc_of(c) : 0);
      else
        for (k = 0; k < r->n; k++) {
          uint32_t m = hs_uni_pool[r->off + k];
          word_add(&w, m, r->marks ? ccc_of(m) : 0);
        }
    }
  }
  if (o->n < o->limit) word_end(v, &w, o);
}

/* ------------------------------------------------------------------------------------------ */
/* What is read (requirements 5 and 6) */

/* The bytes of windows.py's _cut(text, at); *whole when that is the whole text. */
static int64_t cut(const uint8_t *text, int64_t len, int64_t at, int *whole) {
  int64_t pos = 0, chars = 0, mark;
  int k;
  uint32_t c;
  while (pos < len && chars < at) {
    pos += text[pos] < 0x80 ? 1 : hs_utf8_next(text + pos, text + len, &c);
    chars++;
  }
  *whole = pos >= len;
  if (*whole) return len;
  mark = pos;
  for (k = 0; k < HS_CUT_REACH && pos < len; k++) {
    int step = hs_utf8_next(text + pos, text + len, &c);
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || (c >= 0x4E00 && c <= 0x9FFF)) return pos;
    pos += step;
  }
  return mark;
}

/* A tokenizer's ids of text[0..len), added to o until o->limit are counted: WordPiece's
** tokenize, or unigram.c's. */
typedef void (*Pass)(const void *tok, const uint8_t *text, int64_t len, HsIds *o);

static void wordpiece_pass(const void *tok, const uint8_t *text, int64_t len, HsIds *o) {
  tokenize(tok, text, len, o);
}

static void unigram_pass(const void *tok, const uint8_t *text, int64_t len, HsIds *o) {
  hs_unigram_ids(tok, text, len, o);
}

/* Requirement 6: the ids of the first `most` windows of `per`, from prefixes of the text. */
static int64_t windows(Pass pass, const void *tok, const uint8_t *t, int64_t len, int per,
                       int most, int32_t *ids, int64_t cap) {
  int64_t keep = (int64_t)per * most, bound = (int64_t)HS_PREFIX_CHARS * most;
  int64_t size = (int64_t)HS_FIRST_CHARS * most;
  for (;;) {
    int whole;
    int64_t end = cut(t, len, size, &whole);
    HsIds o;
    o.ids = ids;
    o.cap = cap < keep ? cap : keep;
    o.n = 0;
    o.limit = keep + 1;
    o.nomem = 0;
    pass(tok, t, end, &o);
    if (o.nomem) return -1;
    if (o.n > keep || whole || size >= bound) return o.n < o.cap ? o.n : o.cap;
    size = 2 * size < bound ? 2 * size : bound;
  }
}

int64_t hs_tokenize(const HsVocab *v, const char *text, int64_t len, int most, int32_t *ids,
                    int64_t cap) {
  if (!v || most <= 0 || cap <= 0 || len <= 0 || !text) return 0;
  return windows(wordpiece_pass, v, (const uint8_t *)text, len, HS_WINDOW_PIECES, most, ids, cap);
}

/* ------------------------------------------------------------------------------------------ */
/* The interface of every kind (tokenizer.h) */

struct HsTokenizer {
  int kind;
  HsVocab *wordpiece;
  HsUnigram *unigram;
  int32_t special[5]; /* HS_TOKEN_CLS .. HS_TOKEN_MASK */
};

static uint32_t le32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

static HsTokenizer *bad_tokenizer(HsTokenizer *t, char *err, size_t errcap, const char *why) {
  if (err && errcap) snprintf(err, errcap, "%s", why);
  hs_tokenizer_free(t);
  return NULL;
}

HsTokenizer *hs_tokenizer_open(int kind, const void *section, int64_t len, char *err,
                               size_t errcap) {
  const uint8_t *s = section;
  HsTokenizer *t;
  int k;
  if (kind != HS_TOKENIZER_WORDPIECE && kind != HS_TOKENIZER_UNIGRAM)
    return bad_tokenizer(NULL, err, errcap,
                         "the tokenizer is of a kind this version does not know");
  if (!s || len < 0) return bad_tokenizer(NULL, err, errcap, "the tokenizer's section is missing");
  t = calloc(1, sizeof(*t));
  if (!t) return bad_tokenizer(NULL, err, errcap, "no memory for the tokenizer");
  t->kind = kind;
  if (kind == HS_TOKENIZER_UNIGRAM) {
    static const int order[5] = {HS_UNIGRAM_CLS, HS_UNIGRAM_SEP, HS_UNIGRAM_PAD, HS_UNIGRAM_UNK,
                                 HS_UNIGRAM_MASK};
    t->unigram = hs_unigram_open(s, len, err, errcap);
    if (!t->unigram) return bad_tokenizer(t, NULL, 0, "");
    for (k = 0; k < 5; k++) t->special[k] = hs_unigram_special(t->unigram, order[k]);
    return t;
  }
  if (len < WORDPIECE_HEADER || le32(s) != 1)
    return bad_tokenizer(t, err, errcap, "the WordPiece tokenizer's section is not of version 1");
  if (le32(s + 4) != WORDPIECE_BERT_UNCASED)
    return bad_tokenizer(t, err, errcap,
                  "the WordPiece tokenizer's section asks for a normalizer other than BERT's "
                  "uncased one (lower case, accents stripped, CJK split, text cleaned)");
  if (le32(s + 12) != (uint64_t)len - WORDPIECE_HEADER || le32(s + 8) == 0 ||
      le32(s + 8) > INT32_MAX)
    return bad_tokenizer(t, err, errcap,
                         "the WordPiece tokenizer's section is not as long as it says");
  t->wordpiece = hs_vocab_new((const char *)s + WORDPIECE_HEADER, len - WORDPIECE_HEADER,
                              (int32_t)le32(s + 8));
  if (!t->wordpiece)
    return bad_tokenizer(t, err, errcap,
                  "the WordPiece tokenizer's section is not its count of NUL-ended pieces "
                  "with [UNK] among them, or there is no memory to read it");
  for (k = 0; k < 5; k++) t->special[k] = hs_vocab_id(t->wordpiece, SPECIAL_ROLE[k]);
  return t;
}

void hs_tokenizer_free(HsTokenizer *t) {
  if (!t) return;
  hs_vocab_free(t->wordpiece);
  hs_unigram_free(t->unigram);
  free(t);
}

int32_t hs_tokenizer_special(const HsTokenizer *t, int which) {
  return t && which >= 0 && which < 5 ? t->special[which] : -1;
}

int32_t hs_tokenizer_size(const HsTokenizer *t) {
  if (!t) return 0;
  return t->unigram ? hs_unigram_size(t->unigram) : t->wordpiece->n;
}

int32_t hs_tokenizer_id(const HsTokenizer *t, const char *piece, int64_t len) {
  int32_t node;
  if (!t || !piece || len <= 0) return -1;
  if (t->unigram) return hs_unigram_id(t->unigram, (const uint8_t *)piece, len);
  node = walk(t->wordpiece, 0, piece, (size_t)len);
  return node <= 0 ? -1 : t->wordpiece->term[node];
}

int64_t hs_tokenizer_ids(const HsTokenizer *t, const char *prefix, int64_t plen,
                         const char *text, int64_t len, int per, int most, int32_t *ids,
                         int64_t cap) {
  Pass pass;
  const void *tok;
  uint8_t *both;
  int64_t take, n;
  if (!t || per <= 0 || per > HS_TOKENIZER_PER || most <= 0 || most > HS_TOKENIZER_MOST ||
      cap <= 0 || !ids)
    return 0;
  if (!text || len < 0) len = 0;
  if (!prefix || plen < 0) plen = 0;
  pass = t->unigram ? unigram_pass : wordpiece_pass;
  tok = t->unigram ? (const void *)t->unigram : (const void *)t->wordpiece;
  if (plen == 0)
    return len ? windows(pass, tok, (const uint8_t *)text, len, per, most, ids, cap) : 0;
  /* The prefix and as much of the text as the cuts can reach (4 bytes a character at most),
  ** side by side: they are read as one text, as Python's prefix + text is. */
  take = 4 * ((int64_t)HS_PREFIX_CHARS * most + HS_CUT_REACH + 1);
  if (take > len) take = len;
  both = malloc((size_t)(plen + take));
  if (!both) return -1;
  memcpy(both, prefix, (size_t)plen);
  if (take) memcpy(both + plen, text, (size_t)take);
  n = windows(pass, tok, both, plen + take, per, most, ids, cap);
  free(both);
  return n;
}

double hs_tokenizer_readable(const HsTokenizer *t, const int32_t *ids, int64_t n) {
  int64_t counted = 0, unreadable = 0, i;
  if (!t) return 0;
  if (t->wordpiece) return hs_readable_share(t->wordpiece, ids, n);
  for (i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id >= 0 && (id == t->special[HS_TOKEN_CLS] || id == t->special[HS_TOKEN_SEP] ||
                    id == t->special[HS_TOKEN_PAD]))
      continue;
    counted++;
    unreadable += id < 0 || id >= hs_unigram_size(t->unigram) || id == t->special[HS_TOKEN_UNK];
  }
  return counted ? 1.0 - (double)unreadable / (double)counted : 1.0;
}
