"""Snippet marking (issue 42): the pattern a search builds for its terms no longer holds the
class of TRIGRAM_SCRIPTS (CJK, Thai, Lao, Myanmar, Khmer; compiling it was most of a warm
search), and marks exactly what it did.

The oracle is the marking as it was (main at 7e9f4ad), copied here: one regex per set of terms
with the class in its look-arounds, run on the text itself, and each script term's every place.
"""

import random
import re

import pytest

from hybridsql.db.schema import TRIGRAM_SCRIPTS
from hybridsql.files.chunking import heading_at
from hybridsql.search.snippets import (
    _inflected,
    _marks,
    highlight_terms,
    make_snippet,
    matched_heading,
)

_SCRIPT_RUN = re.compile(f"[{TRIGRAM_SCRIPTS}]+")
_WORD_CHAR = f"(?-i:[^\\W{TRIGRAM_SCRIPTS}])"


def old_pattern(terms: tuple, prefix: bool):
    """snippets._mark_pattern at 7e9f4ad, unchanged."""
    ordered = sorted(terms, key=len, reverse=True)
    script = [re.escape(t) for t in ordered if _SCRIPT_RUN.search(t)]
    plain = [t for t in ordered if not _SCRIPT_RUN.search(t)]
    if prefix:
        words = f"(?:{'|'.join(map(re.escape, plain))}){_WORD_CHAR}*"
    else:
        words = f"(?:{'|'.join(map(_inflected, plain))})(?!{_WORD_CHAR})"
    groups = script + ([rf"(?<!{_WORD_CHAR}){words}"] if plain else [])
    return re.compile("|".join(groups), re.IGNORECASE)


def old_marked(text: str, terms: tuple, prefix: bool) -> str:
    """snippets._marked at 7e9f4ad (with its _script_pattern), unchanged."""
    spans = [m.span() for m in old_pattern(terms, prefix).finditer(text)]
    script = [re.escape(t) for t in sorted(terms, key=len, reverse=True) if _SCRIPT_RUN.search(t)]
    if script:
        starts = re.compile(f"(?=({'|'.join(script)}))", re.IGNORECASE)
        spans += [(m.start(), m.start() + len(m.group(1))) for m in starts.finditer(text)]
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


# Letters of both cases and their odd folds (long s, Kelvin sign, dotted I, sharp s), digits, _,
# every regex metacharacter, apostrophes, Han, kana, Hangul, fullwidth letters of both cases,
# CJK punctuation, a character of plane 15's private use area (where the copy puts CJK: 中 is
# U+F4E2D there) and others outside the BMP.
ALPHABET = (
    "abcdeisxyzABCDEISXYZ019_ſKİıßéÉñ"
    ".^$*+?{}[]\\|()-/'’"
    "中文数据库迁移東京登录かなカナ한국어가ＡＢＣａｂｃ１、。「」〇々ภาษาไทยພາສາမြန်မာខ្មែរ"
    "\U000f4e2d\U000f0061\U0001f600\U00020000"
)
STEMS = [
    "deploy",
    "release",
    "arg",
    "in",
    "box",
    "match",
    "c++",
    "ERR_CONN",
    "s",
    "数据",
    "ａｂ",
    "ภาษา",
]
SUFFIXES = ["", "s", "es", "ed", "ing", "'s", "d", "ment"]


def random_word(rng: random.Random) -> str:
    if rng.random() < 0.5:
        word = rng.choice(STEMS) + rng.choice(SUFFIXES)
        return word.upper() if rng.random() < 0.2 else word
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 6)))


def random_text(rng: random.Random, words: int) -> str:
    gaps = [" ", " ", "\n", "", ", ", "—", "中"]
    return "".join(random_word(rng) + rng.choice(gaps) for _ in range(words))


def term_sets(rng: random.Random, count: int):
    """Terms as searches make them (highlight_terms of a generated query) and raw ones: words
    and their inflections together, prefixes of each other, metacharacters, CJK."""
    for _ in range(count):
        query = " ".join(random_word(rng) for _ in range(rng.randint(1, 8)))
        yield highlight_terms(query)
        terms = [random_word(rng) for _ in range(rng.randint(1, 6))]
        yield [t for t in dict.fromkeys(terms) if t]


@pytest.mark.parametrize("seed", range(2))
def test_marking_is_what_the_class_pattern_marked(seed):
    rng = random.Random(seed)
    checked = 0
    for terms in term_sets(rng, 150):
        if not terms:
            continue
        for prefix in (False, True):
            old, new = old_pattern(tuple(terms), prefix), _marks(tuple(terms), prefix)
            for _ in range(4):
                text = random_text(rng, rng.randint(0, 40))
                if rng.random() < 0.5:  # the terms themselves in the text, inflected or not
                    text += " " + " ".join(t + rng.choice(SUFFIXES) for t in terms)
                found = old.search(text)
                assert new.first(text) == (found.start() if found else None), (terms, text)
                assert new.mark(text) == old_marked(text, tuple(terms), prefix), (terms, text)
                width = rng.choice((10, 40, 240))
                start = max(0, found.start() - width // 3) if found else 0
                piece = old_marked(text[start : start + width], tuple(terms), prefix)
                snippet = (
                    ("…" if start else "")
                    + piece.strip()
                    + ("…" if start + width < len(text) else "")
                )
                assert make_snippet(text, terms, width, prefix) == snippet
                chunk = "# A\n\n## B\n" + text
                found = old.search(chunk)
                line = chunk.count("\n", 0, found.start()) if found else None
                heading = heading_at(chunk, "A", line, True) if found else "A"
                assert matched_heading(chunk, "A", 1, terms, prefix) == heading
                checked += 1
    assert checked > 500


def test_the_scripts_fold_only_to_themselves():
    """What the private use copy relies on: each TRIGRAM_SCRIPTS character's lowercase is one
    character of them, two of them match under IGNORECASE exactly when their lowercases are
    the same, and no other character matches one of them under IGNORECASE."""
    cjk = re.compile(f"[{TRIGRAM_SCRIPTS}]")
    chars = "".join(chr(c) for c in range(0x110000) if cjk.match(chr(c)))
    assert all(len(c.lower()) == 1 and cjk.match(c.lower()) for c in chars)
    cased = [c for c in chars if c.lower() != c or c.upper() != c]
    for c in cased:
        folded = {m.group() for m in re.finditer(re.escape(c), chars, re.IGNORECASE)}
        assert folded == {d for d in chars if d.lower() == c.lower()}
    others = "".join(chr(c) for c in range(0x110000) if not cjk.match(chr(c)) and c != 0)
    assert re.compile(f"[{TRIGRAM_SCRIPTS}]", re.IGNORECASE).findall(others) == []
