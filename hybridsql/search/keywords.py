"""The keyword plan: how a user's text becomes an FTS5 query that cannot fail, and LIKE terms.

Also the vocabulary of query text the snippets share: what a word, a CJK run and a stopword
are, how many terms a search keeps, and clean_text for text SQLite must take.
"""

import re
from dataclasses import dataclass, field

from hybridsql.db.schema import CJK as _CJK
from hybridsql.db.schema import FTS_TABLES

_CJK_RUN = re.compile(f"[{_CJK}]+")
_SURROGATE = re.compile("[\ud800-\udfff]")
_LETTER = re.compile(r"[^\W_]")  # a letter or digit: Han, kana, Hangul and fullwidth ones too
MAX_TERMS = 32  # distinct query terms kept, for FTS5 and for LIKE
MAX_TERM_CHARS = 64  # longer words and CJK runs are cut (a sha256 in hex still fits)
_WORD = re.compile(rf"[^\W_{_CJK}]+")
_PIECE = re.compile(f"[^\\s{_CJK}]+")  # text between whitespace and CJK
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
    query: str, fts: bool = True, prefix: bool = False, tables=FTS_TABLES["document"]
) -> KeywordPlan:
    """Turns text into FTS5 syntax that cannot fail: every term is a quoted string.

    ASCII and other non-CJK text goes to the ``porter unicode61`` table, its words OR-ed so a
    document with only some of them is still found (a word that FTS5 would split, like
    ``ERR_CONN_RESET``, becomes a phrase; stopwords are dropped unless nothing else is left).
    Text with CJK goes to the trigram table, its CJK runs and words AND-ed (runs under three
    characters cannot use trigrams and are left to LIKE); that table holds only chunks with CJK
    text. CJK punctuation alone (「」、。) around other words does not make text CJK: "「rollback」"
    is searched as "rollback" is, in every chunk. The LIKE terms (CJK runs of any
    length, words of three or more characters) serve when FTS5 is missing or finds nothing.
    ``tables``: the (porter, trigram) tables of the kind of chunks searched.
    """
    cjk_runs = bounded(dict.fromkeys(_CJK_RUN.findall(query)))
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
    kept = list(words or stopwords)[:MAX_TERMS]
    like_terms = bounded(cjk_runs + [w for piece in kept for w in piece if len(w) >= 3])
    if not fts:
        return KeywordPlan(None, None, like_terms)
    if any(_LETTER.search(run) for run in cjk_runs) or (cjk_runs and not kept):
        terms = [t for t in cjk_runs + [" ".join(w) for w in kept] if len(t) >= 3]
        match = " AND ".join(_quote(t) for t in terms) or None
        return KeywordPlan(tables[1], match, like_terms)
    terms = list(dict.fromkeys(_fts_term(w, prefix) for w in kept))
    return KeywordPlan(tables[0], " OR ".join(terms) or None, like_terms, terms)


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
