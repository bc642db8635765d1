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


# A marked word may not continue into a letter, digit or _ that is not in TRIGRAM_SCRIPTS (an
# identifier such as ERR_INVALID_ARG_TYPE is one word, so ERR does not mark a piece of it). As a
# character class of those scripts' ranges that costs every new set of query terms most of a warm
# search: `re` expands the ranges code point by code point each time it compiles a pattern
# holding it (3.5 ms a new set of terms, issue 42). So the pattern reads a copy of the text where
# each character of those scripts is one character of plane 15's private use area (U+F0000 + its
# lowercase's code point), no word character and caseless, and a word's edges are plain `\w`
# look-arounds. The copy has the same length, so its matches are the text's; each such
# character's lowercase is one character of those scripts and `re` folds no other character to
# one (tests/test_snippets.py checks each), so IGNORECASE matches as in the text. Text or terms
# that hold a character of plane 15 themselves are marked with the class.
_PRIVATE = 0xF0000
_PLANE_15 = re.compile("[\U000f0000-\U000fffff]")
_WORD_CHAR = f"(?-i:[^\\W{TRIGRAM_SCRIPTS}])"  # the class; IGNORECASE off inside it: faster


def _private(run: str) -> str:
    return "".join(chr(_PRIVATE + ord(c.lower())) for c in run)


def _comparable(text: str) -> str | None:
    """``text`` with its characters of TRIGRAM_SCRIPTS in the private use area (``_private``);
    None where it holds a character of plane 15 already."""
    if text.isascii():
        return text
    if _PLANE_15.search(text):
        return None
    if not _SCRIPT_RUN.search(text):
        return text
    return _SCRIPT_RUN.sub(lambda m: _private(m.group()), text)


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


class _Marks:
    """What marks a search's terms in its results' text; built once per search, not per result
    (``_marks``).

    Terms in TRIGRAM_SCRIPTS (a query's trigrams, short pieces, its runs of punctuation) match
    anywhere, as the trigram table matches them. Other terms mark whole words only: the word
    itself or an inflection of it (``_inflected``), or with ``prefix`` (the search matched word
    prefixes) any word that starts with it, marked whole (``auth`` marks ``authentication``).
    One look-behind for all the words, where one per term made Python try every term at every
    position (5 x slower). Script terms go first: one that matches where a word does is the
    longer. The pattern reads the text's copy with those scripts in the private use area
    (``_comparable``).
    """

    def __init__(self, terms: tuple, prefix: bool):
        ordered = sorted(terms, key=len, reverse=True)
        self.script = [t for t in ordered if _SCRIPT_RUN.search(t)]
        self.plain = [t for t in ordered if not _SCRIPT_RUN.search(t)]
        self.prefix = prefix
        comparable = [_comparable(t) for t in self.script + self.plain]
        self.pattern = None
        if None not in comparable:
            self.pattern = self._compile(comparable[: len(self.script)], self.plain, r"\w")
        # Where each script term starts, overlapping ones too (a look-ahead matches at every
        # place): the trigrams of a stretch the text shares with the query overlap, and together
        # they mark all of it. Literal terms: it reads the text itself.
        escaped = "|".join(map(re.escape, self.script))
        self.starts = re.compile(f"(?=({escaped}))", re.IGNORECASE) if self.script else None

    def _compile(self, script: list, plain: list, word_char: str):
        if self.prefix:
            words = f"(?:{'|'.join(map(re.escape, plain))}){word_char}*"
        else:
            words = f"(?:{'|'.join(map(_inflected, plain))})(?!{word_char})"
        groups = list(map(re.escape, script)) + ([rf"(?<!{word_char}){words}"] if plain else [])
        return re.compile("|".join(groups), re.IGNORECASE)

    @functools.cached_property
    def with_class(self):
        """The pattern that reads the text itself, for text or terms with plane 15 in them."""
        return self._compile(self.script, self.plain, _WORD_CHAR)

    def _matches(self, text: str):
        """(the text the pattern reads, the pattern): the copy where it can be made."""
        comparable = _comparable(text) if self.pattern is not None else None
        if comparable is None:
            return text, self.with_class
        return comparable, self.pattern

    def first(self, text: str) -> int | None:
        """Where the first marked term starts in ``text``, or None."""
        comparable, pattern = self._matches(text)
        found = pattern.search(comparable)
        return None if found is None else found.start()

    def mark(self, text: str) -> str:
        """``text`` with what the terms match in <mark>: the pattern's matches and every place of
        a script term, joined where they overlap or touch, so that a stretch of CJK or Thai
        that matched trigram after trigram is one mark."""
        comparable, pattern = self._matches(text)
        spans = [m.span() for m in pattern.finditer(comparable)]
        if self.starts is not None:
            spans += [(m.start(), m.start() + len(m.group(1))) for m in self.starts.finditer(text)]
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


@functools.lru_cache(maxsize=64)
def _marks(terms: tuple, prefix: bool = False) -> _Marks:
    return _Marks(terms, prefix)


def make_snippet(text: str, terms, width: int = 240, prefix: bool = False) -> str:
    """About ``width`` characters of ``text`` around the first query term, terms in <mark>
    (whole words only: see ``_marks``)."""
    if not terms:
        return text[:width].strip() + ("…" if len(text) > width else "")
    marks = _marks(tuple(terms), prefix)
    first = marks.first(text)
    start = max(0, first - width // 3) if first is not None else 0
    piece = marks.mark(text[start : start + width])
    return ("…" if start else "") + piece.strip() + ("…" if start + width < len(text) else "")


def matched_heading(text: str, heading: str, start_line: int, terms, prefix: bool) -> str:
    """The heading path over the first line a snippet marks: a chunk of several sections is
    labelled by the section that matched. The chunk's own ``heading`` where nothing is marked."""
    first = _marks(tuple(terms), prefix).first(text) if terms else None
    if first is None:
        return heading
    return heading_at(text, heading, text.count("\n", 0, first), start_line == 1)
