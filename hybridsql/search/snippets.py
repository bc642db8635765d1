"""Snippets and highlighting: the query terms marked in a result's text, the heading that
matched, and text made harmless on a terminal line (visible)."""

import functools
import re

from hybridsql.db.schema import TRIGRAM_SCRIPTS
from hybridsql.files.chunking import heading_at
from hybridsql.search.keywords import _EDGES, _SCRIPT_RUN, _WORD, STOPWORDS, bounded, script_terms

# What a terminal acts on or breaks a line at, or what reorders a line: C0 controls but tab,
# DEL, C1 controls, the line and paragraph separators, and the bidirectional marks, embeddings,
# overrides and isolates (an override can show a line's text in another order).
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """Text from files, the index or the user made harmless on a terminal line: each control
    character but tab (an escape sequence that would clear the screen or retitle the window, a
    line break that would start what looks like another result) is shown as a Python-style
    escape, ``\\x1b``, ``\\x0a``, ``\\u2028``. JSON output is left as it is."""
    return _CONTROL.sub(_escape, text)


def _escape(match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def highlight_terms(query: str) -> list:
    """What a snippet marks: each word of the query as typed, its parts, and what the keyword
    plan searches of its text in TRIGRAM_SCRIPTS (keywords.script_terms): its trigrams, or,
    where it has none, its pieces under three characters (which only LIKE matches), or its
    runs as typed (punctuation alone); stopwords only when the query has nothing else, as in
    keyword_plan."""
    script = script_terms(query)
    content = bounded(t for t in _typed_terms(query) if t and t.lower() not in STOPWORDS)
    if script.grams or script.short:
        return bounded(content + (script.grams or script.short))
    content = content or bounded(t for t in _typed_terms(query) if t)
    return content or bounded(m.group() for m in _SCRIPT_RUN.finditer(query))


def _typed_terms(query: str):
    """The words as typed, and their parts, leaving out the text in TRIGRAM_SCRIPTS (which
    script_terms reads)."""
    pieces = dict.fromkeys(_SCRIPT_RUN.sub(" ", query).split())
    for piece in pieces:
        yield piece.strip(_EDGES)
    for piece in pieces:
        yield from _WORD.findall(piece.strip(_EDGES))


# Letters, digits and _ but not TRIGRAM_SCRIPTS: what a marked word may not continue into. An
# identifier such as ERR_INVALID_ARG_TYPE is one word, so ERR does not mark a piece of it. The
# class holds both cases already, so IGNORECASE is turned off inside it: case-folding its Unicode
# ranges made compiling a search's pattern take about 20 ms, every search of a new process.
_WORD_CHAR = f"(?-i:[^\\W{TRIGRAM_SCRIPTS}])"


def _inflected(term: str) -> str:
    """The regex of a typed word and its regular inflections (plural, possessive, -ed, -ing),
    which porter stemming finds too: ``deploy`` marks ``deploys`` and ``deployed``, and
    ``releases`` marks ``release``; never the start of an unrelated longer word (``arg`` in
    ``argument``). Words of under three characters mark only themselves: ``in`` + ``g`` is
    another word."""
    if len(term) > 3 and term[-1] in "sS" and term[-2] not in "sS'":
        term = term[:-1]
    word = re.escape(term)
    if len(term) < 3 or not term[-1].isalpha():
        return word
    suffixes: tuple[str, ...]
    if term[-1] in "eE":
        suffixes = ("s", "d", "'s")
    else:
        plural = "es" if term.lower().endswith(("s", "x", "z", "ch", "sh")) else "s"
        suffixes = (plural, "ed", "ing", "'s")
    return word + "(?:" + "|".join(suffixes) + ")?"


@functools.lru_cache(maxsize=64)
def _mark_pattern(terms: tuple, prefix: bool = False):
    """The regex that finds ``terms``, longest first; built once per search, not per result.

    Terms in TRIGRAM_SCRIPTS (a query's trigrams, short pieces, its runs of punctuation) match
    anywhere, as the trigram table matches them. Other terms mark whole words only: the word
    itself or an inflection of it (``_inflected``), or with ``prefix`` (the search matched word
    prefixes) any word that starts with it, marked whole (``auth`` marks ``authentication``).
    One look-behind for all the words, where one per term made Python try every term at every
    position (5 x slower). Script terms go first: one that matches where a word does is the
    longer.
    """
    ordered = sorted(terms, key=len, reverse=True)
    script = [re.escape(t) for t in ordered if _SCRIPT_RUN.search(t)]
    plain = [t for t in ordered if not _SCRIPT_RUN.search(t)]
    if prefix:
        words = f"(?:{'|'.join(map(re.escape, plain))}){_WORD_CHAR}*"
    else:
        words = f"(?:{'|'.join(map(_inflected, plain))})(?!{_WORD_CHAR})"
    groups = script + ([rf"(?<!{_WORD_CHAR}){words}"] if plain else [])
    return re.compile("|".join(groups), re.IGNORECASE)


@functools.lru_cache(maxsize=64)
def _script_pattern(terms: tuple):
    """Where each term in TRIGRAM_SCRIPTS starts, overlapping ones too (a look-ahead matches
    at every place): the trigrams of a stretch the text shares with the query overlap, and
    together they mark all of it. None when no term is in those scripts."""
    script = [re.escape(t) for t in sorted(terms, key=len, reverse=True) if _SCRIPT_RUN.search(t)]
    return re.compile(f"(?=({'|'.join(script)}))", re.IGNORECASE) if script else None


def _marked(text: str, terms: tuple, prefix: bool) -> str:
    """``text`` with what ``terms`` match in <mark>: the matches of ``_mark_pattern`` and every
    place of a script term, joined where they overlap or touch, so that a stretch of CJK or Thai
    that matched trigram after trigram is one mark."""
    spans = [m.span() for m in _mark_pattern(terms, prefix).finditer(text)]
    script = _script_pattern(terms)
    if script is not None:
        spans += [(m.start(), m.start() + len(m.group(1))) for m in script.finditer(text)]
    merged: list[list] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        elif end > start:
            merged.append([start, end])
    out, at = [], 0
    for start, end in merged:
        out += [text[at:start], "<mark>", text[start:end], "</mark>"]
        at = end
    return "".join(out) + text[at:]


def make_snippet(text: str, terms, width: int = 240, prefix: bool = False) -> str:
    """About ``width`` characters of ``text`` around the first query term, terms in <mark>
    (whole words only: see ``_mark_pattern``)."""
    if not terms:
        return text[:width].strip() + ("…" if len(text) > width else "")
    terms = tuple(terms)
    first = _mark_pattern(terms, prefix).search(text)
    start = max(0, first.start() - width // 3) if first else 0
    piece = _marked(text[start : start + width], terms, prefix)
    return ("…" if start else "") + piece.strip() + ("…" if start + width < len(text) else "")


def matched_heading(text: str, heading: str, start_line: int, terms, prefix: bool) -> str:
    """The heading path over the first line a snippet marks: a chunk of several sections is
    labelled by the section that matched. The chunk's own ``heading`` where nothing is marked."""
    first = _mark_pattern(tuple(terms), prefix).search(text) if terms else None
    if first is None:
        return heading
    return heading_at(text, heading, text.count("\n", 0, first.start()), start_line == 1)
