"""The keyword plan: how a user's text becomes an FTS5 query that cannot fail, and LIKE terms.

Also the vocabulary of query text the snippets share: what a word, a run of a script written
without spaces (and its n-grams) and a stopword are, how many terms a search keeps, and
clean_text for text SQLite must take.
"""

import functools
import re
import unicodedata
from dataclasses import dataclass, field

from hybridsql.db.schema import FTS_TABLES, TRIGRAM_SCRIPTS

# A run of the scripts the trigram tables hold: CJK, and Thai, Lao, Myanmar and Khmer, written
# without spaces between words (db/schema.py, TRIGRAM_SCRIPTS).
_SCRIPT_RUN = re.compile(f"[{TRIGRAM_SCRIPTS}]+")
_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_TERMS = 32  # distinct query terms kept, for FTS5 and for LIKE
MAX_TERM_CHARS = 64  # longer words and runs are cut (a sha256 in hex still fits)
NGRAM = 3  # the trigram tables' tokens: a piece of text this long is one of them
_WORD = re.compile(rf"[^\W_{TRIGRAM_SCRIPTS}]+")
_PIECE = re.compile(f"[^\\s{TRIGRAM_SCRIPTS}]+")  # text between whitespace and those scripts
_EDGES = ".,;:!?\"'()[]{}"  # punctuation around a typed word
# Function words, left out of keyword queries that have other words: "recipe for chocolate
# cake" must not match every note that says "for".
STOPWORDS = frozenset(
    """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its
itself just me more most my myself no nor not now of off on once only or other our ours
ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself yourselves
""".split()
)


@dataclass
class KeywordPlan:
    """How a user's text becomes keyword search: an FTS5 query on one table, and LIKE terms.

    ``any_of`` holds the OR-ed terms of ``match`` when the statement may keep only the rarest.
    """

    table: str | None
    match: str | None
    like_terms: list
    any_of: list = field(default_factory=list)


def keyword_plan(
    query: str,
    fts: bool = True,
    prefix: bool = False,
    tables=FTS_TABLES["document"],
    like_trigrams: bool = False,
) -> KeywordPlan:
    """Turns text into FTS5 syntax that cannot fail: every term is a quoted string.

    Text in none of TRIGRAM_SCRIPTS goes to the ``porter unicode61`` table, its words OR-ed so
    a document with only some of them is still found (a word that FTS5 would split, like
    ``ERR_CONN_RESET``, becomes a phrase; stopwords are dropped unless nothing else is left).
    Text with letters of those scripts (CJK, Thai...: words not parted by spaces) goes to the
    trigram table, which holds only the chunks that have some: its pieces' trigrams and its
    other words' parts of three or more characters OR-ed (``script_terms``), ranked by bm25 as
    words are, so a question finds the text that shares most of its rare pieces. Their
    punctuation alone (「」、。) around other words does not send text there: "「rollback」" is
    searched as "rollback" is, in every chunk.

    The LIKE terms serve when FTS5 is missing or finds nothing: words of three or more
    characters, and pieces under three characters, which no trigram holds. The trigrams too
    where FTS5 is missing, or with ``like_trigrams``: where the trigram tables may lack chunks
    of those scripts (an index of schema 5, searched read-only before its upgrade, holds no Thai
    there). Elsewhere a trigram FTS5 did not find is in no chunk, and LIKE would read every
    chunk for each one (a Chinese sentence on the real corpus: 0.07 s, 0.36 s with them).
    ``tables``: the (porter, trigram) tables of the kind of chunks searched.
    """
    words, stopwords = _words(query)
    kept = (words or stopwords)[:MAX_TERMS]
    runs = bounded(m.group() for m in _SCRIPT_RUN.finditer(query))
    script = script_terms(query, words)
    if script.grams or script.short or (runs and not kept):
        # Runs without letters (punctuation alone, nothing else typed) are searched as typed.
        bare = [] if script.grams or script.short else runs
        terms = bounded(script.grams + script.parts + [r for r in bare if len(r) >= NGRAM])
        grams = script.grams if like_trigrams or not fts else []
        like_terms = bounded(grams + script.parts + script.short + bare)
        if not fts:
            return KeywordPlan(None, None, like_terms)
        quoted = [_quote(t) for t in terms]
        return KeywordPlan(tables[1], " OR ".join(quoted) or None, like_terms, quoted)
    like_terms = bounded(runs + [w for piece in kept for w in piece if len(w) >= NGRAM])
    if not fts:
        return KeywordPlan(None, None, like_terms)
    terms = list(dict.fromkeys(_fts_term(w, prefix) for w in kept))
    return KeywordPlan(tables[0], " OR ".join(terms) or None, like_terms, terms)


def _words(query: str) -> tuple[list, list]:
    """(words, stopwords) of the query outside TRIGRAM_SCRIPTS, each a tuple of its parts (the
    letters and digits of a piece between spaces: ``ERR_CONN_RESET`` is one word of three
    parts), distinct, in order; at most MAX_TERMS words, read no further than that."""
    words: dict[tuple, None] = {}  # dicts as ordered sets
    stopwords: dict[tuple, None] = {}
    for piece in dict.fromkeys(_PIECE.findall(query)):  # each distinct piece, in order
        parts = _WORD.findall(piece)
        if not parts:
            continue
        word = tuple(bounded(parts, MAX_TERMS // 4))
        if len(word) == 1 and word[0].lower() in STOPWORDS:
            stopwords.setdefault(word)
        else:
            words.setdefault(word)
            if len(words) == MAX_TERMS:
                break  # the rest of a long text cannot change the plan
    return list(words), list(stopwords)


@functools.cache
def _script_piece() -> re.Pattern:
    """A piece of text in TRIGRAM_SCRIPTS: their letters, digits and combining marks (Thai's
    vowels and tone marks are marks, which ``\\w`` leaves out), not their punctuation, symbols
    or spaces. Read from the Unicode database on first use (a few milliseconds, in a process
    whose query has such text)."""
    ranges = re.findall("(.)-(.)", TRIGRAM_SCRIPTS)
    apart = "".join(
        re.escape(chr(c))
        for low, high in ranges
        for c in range(ord(low), ord(high) + 1)
        if unicodedata.category(chr(c))[0] in "PSZ"
    )
    return re.compile(f"(?:(?![{apart}])[{TRIGRAM_SCRIPTS}])+")


@dataclass
class ScriptTerms:
    """What the trigram table searches of a query with text in TRIGRAM_SCRIPTS (script_terms)."""

    grams: list  # the trigrams of its pieces
    parts: list  # its other words' parts of three or more characters
    short: list  # its pieces under three characters, which no trigram holds (LIKE's alone)


def script_terms(query: str, words=None) -> ScriptTerms:
    """The terms of the trigram table's plan. The pieces of the query's text in
    TRIGRAM_SCRIPTS (letters, digits and marks between punctuation, spaces and other scripts;
    the first MAX_TERMS distinct ones, each cut to MAX_TERM_CHARS) give their trigrams when
    they have three characters or more; the other words (``words``, as ``_words`` finds them,
    stopwords left out) give their parts that long, at most MAX_TERMS // 2 of them.

    At most MAX_TERMS terms in all. Where there are more, the words' parts first, then the
    trigrams that tile each piece (at 0, 3, 6... and its last), which cover every character,
    then those at 1, 4, 7..., then at 2, 5, 8..., each round in the order of the text: a
    question of up to about 90 characters is covered whole (a longer text, by its first ones).
    Overlapping trigrams all count: a document that shares a longer stretch of the query matches
    more of them, as a phrase would score it."""
    if words is None:
        words = _words(query)[0]
    parts = bounded((w for piece in words for w in piece if len(w) >= NGRAM), MAX_TERMS // 2)
    pieces = bounded(
        p for run in _SCRIPT_RUN.finditer(query) for p in _script_piece().findall(run.group())
    )
    found = []  # (round, where in the text, trigram)
    short = []
    for number, piece in enumerate(pieces):
        if len(piece) < NGRAM:
            short.append(piece)
            continue
        last = len(piece) - NGRAM
        for start in range(last + 1):
            taken = 0 if start == last else start % NGRAM
            found.append((taken, (number, start), piece[start : start + NGRAM]))
    first: dict[str, tuple] = {}
    for _, where, gram in sorted(found):
        if gram not in first and len(first) + len(parts) < MAX_TERMS:
            first[gram] = where
    # in the order of the text, so that a plan reads as its query does
    return ScriptTerms(sorted(first, key=first.__getitem__), parts, short)


def _fts_term(word: tuple, prefix: bool) -> str:
    """One word of the query in FTS5 syntax. With ``prefix``, a one-part word matches as a
    prefix OR-ed with itself: bm25 then counts an exact hit twice, at the exact form's own (high)
    idf, so a memory's token ``tokw3x93`` ranks above the words it is a prefix of."""
    quoted = _quote(" ".join(word))
    return f"{quoted} OR {quoted}*" if prefix and len(word) == 1 else quoted


def bounded(terms, most: int = MAX_TERMS) -> list:
    """Distinct terms, at most ``most`` of them, each cut to MAX_TERM_CHARS: a pasted page or a
    megabyte of text must not build SQL deeper or LIKE patterns longer than SQLite allows.
    ``terms`` is read no further than it takes to find them."""
    kept: dict[str, None] = {}
    for term in terms:
        kept.setdefault(term[:MAX_TERM_CHARS])
        if len(kept) == most:
            break
    return list(kept)


def clean_text(text: str) -> str:
    """Text as SQLite can take it: lone surrogates (undecodable bytes, as Python decodes argv)
    become U+FFFD, as they do in indexed files."""
    return _SURROGATE.sub("\ufffd", text)


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _like_pattern(term: str) -> str:
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
