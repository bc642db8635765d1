/*
** The SentencePiece Unigram tokenizer (csrc/model/unigram.c): XLM-R's, as multilingual-e5-small
** and paraphrase-multilingual-MiniLM-L12-v2 use it, read from its section of a model file (the
** layout is unigram.c's header comment; hybridsql/embedding/tokenizer_section.py writes it).
** It knows nothing of SQLite, of the model or of windows: csrc/model/tokenizer.c, the one
** interface of every tokenizer kind, calls it.
*/
#ifndef HYBRIDSQL_UNIGRAM_H
#define HYBRIDSQL_UNIGRAM_H
#include <stddef.h>
#include <stdint.h>

#include "text.h" /* HsIds */

typedef struct HsUnigram HsUnigram;

/* The tokenizer of the section's len bytes, read in place (they must outlive it); NULL with one
** line in err (errcap bytes) when the section is not one, or on no memory. */
HsUnigram *hs_unigram_open(const uint8_t *section, int64_t len, char *err, size_t errcap);
void hs_unigram_free(HsUnigram *u);

/* The ids of text[0..len) (any bytes: invalid UTF-8 is read as Python's "replace" reads it),
** added to o until o->limit are counted; o->nomem set on no memory. */
void hs_unigram_ids(const HsUnigram *u, const uint8_t *text, int64_t len, HsIds *o);

/* Pieces (ids 0 .. n-1); the id of HS_UNIGRAM_UNK and the others, -1 where none. */
#define HS_UNIGRAM_UNK 0
#define HS_UNIGRAM_CLS 1
#define HS_UNIGRAM_SEP 2
#define HS_UNIGRAM_PAD 3
#define HS_UNIGRAM_MASK 4
int32_t hs_unigram_size(const HsUnigram *u);
int32_t hs_unigram_special(const HsUnigram *u, int which);
/* The id of the piece p[0..n), -1 if none. */
int32_t hs_unigram_id(const HsUnigram *u, const uint8_t *p, int64_t n);

#endif
