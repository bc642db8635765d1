"""Writes csrc/model/unicode_tables.h, the Unicode tables of the C tokenizer
(csrc/model/tokenizer.c): what tokenizer.json's BertNormalizer and BertPreTokenizer do with each
code point, derived from Python's unicodedata and checked, code point by code point, against the
tokenizers library that LocalProvider runs. tests/test_tokenizer.py fails when the header is stale.

    python scripts/unicode_tables.py          # rewrites both headers
    python scripts/unicode_tables.py --check  # exits 1, naming the file, when one is stale

It writes csrc/model/grapheme_tables.h too, for the SentencePiece Unigram tokenizer
(csrc/model/unigram.c): each code point's grapheme cluster class and whether it is White_Space,
read from tokenizers (see GRAPHEME below).

What the tokenizer does with one code point c (tokenizers' normalizers/bert.rs and
pre_tokenizers/bert.rs, in this order):
1. clean_text: c is dropped when it is U+0000, U+FFFD or a control character (categories Cc, Cf,
   Co and Cs, except tab, line feed and carriage return; an unassigned code point is kept);
   whitespace becomes a space.
2. handle_chinese_chars: a CJK ideograph (the ranges of CJK below) gets a space on each side.
3. strip_accents (on, as lowercase is): NFD, then every nonspacing mark (Mn) is dropped.
4. lowercase: each character's full lower-case mapping (no context: a final sigma is sigma).
5. The pre-tokenizer splits at whitespace (dropped) and around each punctuation character
   (ASCII punctuation and the categories P*), which is a word of its own.

Where unicodedata and tokenizers disagree, the table takes tokenizers' answer: the model was
trained with that tokenizer, and the C side must give its ids. They disagree because each side
has its own Unicode version: tokenizers' categories (Mn, P*, Cf) come from its
unicode_categories crate, older than any Python's, its lower-case mapping from the Rust standard
library, newer, its NFD from the unicode-normalization crate. With tokenizers 0.23.3 and Python
3.11 (Unicode 14.0) they differ on 562 code points (3.10: 466, 3.12 and 3.13: 627; ``--diff``
lists them): marks, punctuation and format characters newer than tokenizers' categories, which
it keeps as letters of a word (383 nonspacing marks, 104 punctuation characters, 13 format
characters: a word with one is [UNK], as no piece holds them); 55 code points that Unicode 14
leaves unassigned and Rust lower-cases (U+1C89 to U+1C8A); a few whose category changed (U+166D,
So, is punctuation to tokenizers; U+1734, Mc, a nonspacing mark that it drops) or whose NFD it
does not know (U+11938). The table written is tokenizers' answer for every code point, so it is
the same whatever Python runs this (checked with 3.10 to 3.13).

Canonical reordering (NFD sorts a run of combining marks by combining class) matters only for the
marks that survive step 3 (spacing marks, and marks newer than tokenizers' categories whose class
its NFD knows): their classes are written in HS_UNI_CCC, read from the order tokenizers gives
each pair of them. A dropped mark of class 0 ends a run (HS_UNI_BARRIER); which dropped code
points do is read from tokenizers too. No piece of the model's vocabulary holds any of these
marks, nor any code point where the two sides differ, so neither changes the model's ids; the
tests check the order with a vocabulary that holds the marks.
"""

import argparse
import os
import sys
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, "csrc", "model", "unicode_tables.h")
GRAPHEME_HEADER = os.path.join(ROOT, "csrc", "model", "grapheme_tables.h")
TOKENIZER = os.path.join(ROOT, "hybridsql", "data", "tokenizer.json")

# tokenizers' is_chinese_char (normalizers/bert.rs), BERT's own list of CJK ideograph blocks.
CJK = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
CONTROL = {"Cc", "Cf", "Co", "Cs"}

# What a code point is to the tokenizer (the values of HS_UNI_* in the header).
DROP, BARRIER, SPACE, CJK_WORD, PUNCT, WORD, HANGUL = range(7)
KINDS = ("DROP", "BARRIER", "SPACE", "CJK", "PUNCT", "WORD", "HANGUL")
MEANING = (
    "dropped: a control character or a nonspacing mark",
    "dropped, a nonspacing mark of class 0: ends a run of marks NFD sorts",
    "white space: ends a word",
    "a CJK ideograph: a word of its own (its NFD)",
    "punctuation: a word of its own (its NFD)",
    "its NFD without nonspacing marks, lower-cased, goes on the word",
    "a Hangul syllable: its jamo (its NFD, computed) go on the word",
)
BLOCK = 128  # code points a block of the two-stage table


def is_cjk(c: int) -> bool:
    return any(lo <= c <= hi for lo, hi in CJK)


def is_punct(ch: str) -> bool:
    """BertPreTokenizer's punctuation: ASCII punctuation or a category P*."""
    return (ch.isascii() and not ch.isalnum() and ch.isprintable() and ch != " ") or (
        unicodedata.category(ch).startswith("P")
    )


def from_unicodedata(c: int) -> tuple:
    """(kind, output) of code point ``c`` by Python's unicodedata."""
    ch = chr(c)
    cat = unicodedata.category(ch)
    if c in (0, 0xFFFD) or (ch not in "\t\n\r" and cat in CONTROL):
        return DROP, ""
    if ch.isspace():
        return SPACE, " "
    kept = "".join(m for m in unicodedata.normalize("NFD", ch) if unicodedata.category(m) != "Mn")
    out = "".join(m.lower() for m in kept)
    if is_cjk(c):
        return CJK_WORD, out
    if not out:
        return (BARRIER if cat == "Mn" and unicodedata.combining(ch) == 0 else DROP), ""
    if len(out) == 1 and is_punct(out):
        return PUNCT, out
    return WORD, out


def from_tokenizers(normalize, splits: dict, c: int) -> tuple:
    """(kind, output) of code point ``c`` as the tokenizers library reads it; ``splits`` is
    what the pre-tokenizer does with each code point it splits at (see splitting)."""
    ch = chr(c)
    out = normalize(ch)
    if out == "":
        # A dropped code point between two marks that NFD swaps: a nonspacing mark of class 0
        # ends the run and they stay as they are; anything else is transparent.
        between = normalize(SWAPPED[0] + ch + SWAPPED[1])
        return (BARRIER if between == SWAPPED[0] + SWAPPED[1] else DROP), ""
    if out == " ":
        return SPACE, " "
    if len(out) == 3 and out[0] == out[2] == " ":
        return CJK_WORD, out[1]
    if len(out) == 1 and splits.get(out) == PUNCT:
        return PUNCT, out
    if any(m in splits for m in out):
        sys.exit(f"unicode_tables.py: U+{c:04X} becomes {out!r}, which the pre-tokenizer splits")
    return WORD, out


def splitting(pre_tokenize) -> dict:
    """The code points BertPreTokenizer splits a word at: PUNCT (a word of its own) or SPACE
    (dropped), read from it a block at a time, each code point between two letters."""
    found = {}
    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(points), 65536):
        text = "a" + "a".join(points[start : start + 65536]) + "a"
        covered = bytearray(len(text))
        for word, (lo, hi) in pre_tokenize(text):
            covered[lo:hi] = b"\1" * (hi - lo)
            if len(word) == 1 and word != "a":
                found[word] = PUNCT
        for at in range(1, len(text), 2):
            if not covered[at]:
                found[text[at]] = SPACE
    return found


# Two marks that survive strip_accents and that NFD swaps (classes 226 and 216): the probe for
# which dropped code points end a run of marks.
SWAPPED = ("x\U0001d16d", "\U0001d165")


def kept_marks(normalize, table: list) -> dict:
    """The marks that survive strip_accents and that tokenizers' NFD reorders, with their
    canonical combining class. Classes never change once assigned, so tokenizers' class of a
    mark is unicodedata's or 0 (a mark newer than its tables, a starter to it): which one is
    read from the order it gives each pair of them, and every pair is checked."""
    marks = sorted(
        {
            ord(m)
            for kind, out in table
            if kind in (WORD, PUNCT)
            for m in out
            if unicodedata.category(m).startswith("M") or unicodedata.combining(m)
        }
    )
    swaps = {
        (a, b)
        for a in marks
        for b in marks
        if a != b and normalize("x" + chr(a) + chr(b)) == ("x" + chr(b) + chr(a)).lower()
    }
    moved = {m for pair in swaps for m in pair}
    ccc = {m: unicodedata.combining(chr(m)) for m in marks if m in moved}
    for a in marks:
        for b in marks:
            expected = 0 < ccc.get(b, 0) < ccc.get(a, 0)
            if ((a, b) in swaps) != expected:
                sys.exit(
                    f"unicode_tables.py: tokenizers orders U+{a:04X} U+{b:04X} otherwise than "
                    f"Unicode {unicodedata.unidata_version}'s classes: run a newer Python"
                )
    return ccc


def build(show_diff: bool) -> str:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        sys.exit("unicode_tables.py: needs the tokenizers library: pip install -e '.[test]'")
    tok = Tokenizer.from_file(TOKENIZER)
    normalize = tok.normalizer.normalize_str
    splits = splitting(tok.pre_tokenizer.pre_tokenize_str)
    table = []
    differ = []
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:  # never in text: UTF-8 cannot carry them
            table.append((DROP, ""))
            continue
        model = from_unicodedata(c)
        got = from_tokenizers(normalize, splits, c)
        if got != model:
            differ.append((c, model, got))
        table.append(got)
    if show_diff:
        print(f"unicodedata {unicodedata.unidata_version}: {len(differ)} code points differ")
        for c, model, got in differ:
            name = unicodedata.name(chr(c), "unassigned")
            print(
                f"U+{c:04X} {name}: unicodedata {KINDS[model[0]]} {model[1]!r}, "
                f"tokenizers {KINDS[got[0]]} {got[1]!r}"
            )
    ccc = kept_marks(normalize, table)
    return render(table, ccc)


def hangul(c: int) -> str:
    """A Hangul syllable's NFD, which tokenizer.c computes (Unicode's algorithm, chapter 3.12)
    rather than looking up 11,172 entries."""
    s = c - 0xAC00
    lead, vowel, tail = 0x1100 + s // 588, 0x1161 + s % 588 // 28, 0x11A7 + s % 28
    return chr(lead) + chr(vowel) + (chr(tail) if tail != 0x11A7 else "")


def render(table: list, ccc: dict) -> str:
    records: dict = {}  # (kind, output or None for the code point itself, marks) -> index
    pool: list = []
    pool_at: dict = {}
    per_cp = []
    for c, (kind, out) in enumerate(table):
        if 0xAC00 <= c <= 0xD7A3 and kind == WORD and out == hangul(c):
            key = (HANGUL, None, 0)
        else:
            marks = int(any(ord(m) in ccc for m in out))
            key = (kind, None if out == chr(c) else out, marks)
        if key not in records:
            records[key] = len(records)
        per_cp.append(records[key])
    rows = []
    for (kind, out, marks), _ in sorted(records.items(), key=lambda r: r[1]):
        if out is None:
            rows.append((kind, 255, 0, marks))
            continue
        if out not in pool_at:
            pool_at[out] = len(pool)
            pool.extend(ord(m) for m in out)
        rows.append((kind, len(out), pool_at[out], marks))
    blocks: dict = {}
    stage1 = []
    stage2: list = []
    for start in range(0, 0x110000, BLOCK):
        block = tuple(per_cp[start : start + BLOCK])
        if block not in blocks:
            blocks[block] = len(blocks)
            stage2.extend(block)
        stage1.append(blocks[block])
    assert len(records) < 65536 and len(blocks) < 65536 and len(pool) < 65536
    lines = [
        "/* Generated by scripts/unicode_tables.py: do not edit. What tokenizer.json's",
        "** BertNormalizer and BertPreTokenizer (the tokenizers library) do with each code",
        "** point, from Python's unicodedata; tokenizers' answer where the two differ (see the",
        "** script). */",
        "#ifndef HYBRIDSQL_UNICODE_TABLES_H",
        "#define HYBRIDSQL_UNICODE_TABLES_H",
        "#include <stdint.h>",
        "",
    ]
    for i, (name, meaning) in enumerate(zip(KINDS, MEANING, strict=True)):
        lines.append(f"#define HS_UNI_{name} {i} /* {meaning} */")
    lines += [
        f"#define HS_UNI_BLOCK {BLOCK}",
        "#define HS_UNI_SELF 255 /* n: the output is the code point itself */",
        "",
        "/* kind; n output code points at pool[off] (HS_UNI_SELF: the code point itself);",
        "** marks: an output code point is in HS_UNI_CCC. */",
        "typedef struct HsUniRecord {",
        "  uint8_t kind, n, marks;",
        "  uint16_t off;",
        "} HsUniRecord;",
        "",
        "static const HsUniRecord hs_uni_records[] = {",
    ]
    lines += wrap([f"{{{k}, {n}, {m}, {o}}}" for k, n, o, m in rows])
    lines += ["};", "", "static const uint32_t hs_uni_pool[] = {"]
    lines += wrap([f"0x{p:X}" for p in pool] or ["0"])
    lines += ["};", "", f"static const uint16_t hs_uni_stage1[{len(stage1)}] = {{"]
    lines += wrap([str(b) for b in stage1])
    lines += ["};", "", f"static const uint16_t hs_uni_stage2[{len(stage2)}] = {{"]
    lines += wrap([str(r) for r in stage2])
    lines += [
        "};",
        "",
        "/* The marks that survive strip_accents with a non-zero canonical combining class. */",
        "static const struct {",
        "  uint32_t cp;",
        "  uint8_t ccc;",
        "} HS_UNI_CCC[] = {",
    ]
    lines += wrap([f"{{0x{c:X}, {v}}}" for c, v in ccc.items()])
    lines += ["};", "", "#endif", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# GRAPHEME: csrc/model/grapheme_tables.h, for the Unigram tokenizer's Precompiled normalizer.
#
# tokenizers applies a precompiled charsmap one extended grapheme cluster at a time
# (normalizers/precompiled.rs, through the unicode-segmentation crate): a cluster under 6 bytes
# whose bytes start with a key of the charsmap is replaced whole. Which code points form a
# cluster is UAX #29's rules (GB3 to GB999) over each code point's class: G_NAMES below, the
# crate's categories with the Indic_Conjunct_Break values GB9c reads folded in. Each class is
# read from tokenizers itself, whatever Unicode version its crate has: thirteen probes a code
# point, each a short text run through a Precompiled normalizer of our own charsmap (K1 maps
# "a" to "b"; K2 maps every byte but "a" and "\n" to "X", so that the output counts, cluster by
# cluster, one X for a cluster under 6 bytes and one a code point for a longer one), give a
# signature that breaks(), the rules as unigram.c applies them, predicts for each class; a code
# point gets the first class (in G_NAMES' order) that predicts what tokenizers did. Classes no
# text can tell apart are one: Regional_Indicator is Other here (every cluster that holds one is
# a single 4-byte code point or 8 bytes and more, read code point by code point either way).
# Planes 4 to 13 (unassigned) and 15 to 16 (private use) are probed one code point in 4096, and
# must be Other. White_Space (Strip, and an added token's lstrip/rstrip) is what tokenizers'
# WhitespaceSplit splits at (Rust's char::is_whitespace, as both use).

G_NAMES = (
    "OTHER", "CONTROL", "EXTEND", "EXTEND_INCB", "LINKER", "ZWJ", "SPACINGMARK", "PREPEND",
    "L", "V", "T", "LV", "LVT", "EXTPICT", "CONSONANT", "CR", "LF",
)  # fmt: skip
G_MEANING = (
    "any other",
    "a control (GB4, GB5)",
    "Extend, Indic_Conjunct_Break none (GB9)",
    "Extend, Indic_Conjunct_Break=Extend (GB9, GB9c)",
    "Extend, Indic_Conjunct_Break=Linker (GB9, GB9c)",
    "ZWJ (GB9, GB11)",
    "SpacingMark (GB9a)",
    "Prepend (GB9b)",
    "Hangul L (GB6)",
    "Hangul V (GB6, GB7)",
    "Hangul T (GB7, GB8)",
    "Hangul LV (GB6, GB7)",
    "Hangul LVT (GB6, GB8)",
    "Extended_Pictographic (GB11)",
    "Indic_Conjunct_Break=Consonant (GB9c)",
    "carriage return (GB3)",
    "line feed (GB3)",
)
(G_OTHER, G_CONTROL, G_EXTEND, G_EXTEND_INCB, G_LINKER, G_ZWJ, G_SPACINGMARK, G_PREPEND, G_L,
 G_V, G_T, G_LV, G_LVT, G_EXTPICT, G_CONSONANT, G_CR, G_LF) = range(len(G_NAMES))  # fmt: skip
G_EXTENDS = (G_EXTEND, G_EXTEND_INCB, G_LINKER)  # Extend to GB11
G_WHITE = 0x80  # the bit of a White_Space code point in the table


def breaks(classes: list) -> list:
    """UAX #29 over a list of classes, as unicode-segmentation 1.11+ and unigram.c apply it:
    out[i] tells whether a cluster starts at i."""
    out = [True]
    emoji = incb = 0  # GB11: 1 after ExtPict Extend*, 2 after ExtPict Extend* ZWJ; GB9c likewise
    for i, cur in enumerate(classes):
        if i:
            prev = classes[i - 1]
            if prev == G_CR and cur == G_LF:
                cut = False
            elif prev in (G_CONTROL, G_CR, G_LF) or cur in (G_CONTROL, G_CR, G_LF):
                cut = True
            elif (
                (prev == G_L and cur in (G_L, G_V, G_LV, G_LVT))
                or (prev in (G_LV, G_V) and cur in (G_V, G_T))
                or (prev in (G_LVT, G_T) and cur == G_T)
                or cur in (*G_EXTENDS, G_ZWJ, G_SPACINGMARK)
                or prev == G_PREPEND
            ):
                cut = False
            elif cur == G_CONSONANT:
                cut = incb != 2
            else:
                cut = not (prev == G_ZWJ and cur == G_EXTPICT and emoji == 2)
            out.append(cut)
        if cur == G_EXTPICT or (cur in G_EXTENDS and emoji == 1):
            emoji = 1
        else:
            emoji = 2 if cur == G_ZWJ and emoji == 1 else 0
        if cur == G_CONSONANT:
            incb = 1
        elif cur == G_LINKER:
            incb = 2 if incb else 0
        elif cur not in (G_EXTEND_INCB, G_ZWJ):
            incb = 0
    return out


# The probes: the code point probed (_C) among anchors of known class (checked too).
_C = None
_ANCHOR = {
    "a": G_OTHER, "\u00a9": G_EXTPICT, "\u200d": G_ZWJ, "\u0300": G_EXTEND_INCB,
    "\u0301": G_EXTEND_INCB, "\u1100": G_L, "\u1161": G_V, "\u11a8": G_T, "\u0915": G_CONSONANT,
    "\u094d": G_LINKER,
}  # fmt: skip
_PROBES = (
    ("a", _C),  # K1: Extend, ZWJ or SpacingMark after a letter (GB9, GB9a)
    (_C, "a"),  # Prepend (GB9b)
    (_C, "\u0300", "\u0301"),  # a control (GB4)
    (_C, "\u1100", "\u0300"),  # Hangul (GB6 to GB8), on either side of L, V, T
    (_C, "\u1161", "\u0300"),
    (_C, "\u11a8", "\u0300"),
    ("\u1100", _C, "\u0300"),
    ("\u1161", _C, "\u0300"),
    ("\u00a9", "\u200d", _C, "\u0300", "\u0301"),  # Extended_Pictographic after ZWJ (GB11)
    ("\u00a9", _C, "\u200d", "\u00a9", "\u0300"),  # Extend, not SpacingMark, before it
    (_C, "\u094d", "\u0915", "\u0300"),  # Indic_Conjunct_Break: a consonant (GB9c)
    ("\u0915", _C, "\u0915", "\u0300"),  # a linker
    ("\u0915", "\u094d", _C, "\u0915", "\u0300"),  # an extend
)


def _predict(probe: tuple, cls: int, size: int, keyed: bool) -> str:
    """What K2 makes of the probe, the probed code point of class cls and size bytes (keyed:
    whether its first byte is a key of K2, as all but NUL's and "a"'s are)."""
    points = [cls if p is _C else _ANCHOR[p] for p in probe]
    sizes = [size if p is _C else len(p.encode()) for p in probe]
    keys = [keyed if p is _C else p != "a" for p in probe]
    starts = [i for i, cut in enumerate(breaks(points)) if cut] + [len(probe)]
    out = ""
    for s, e in zip(starts, starts[1:], strict=False):
        if sum(sizes[s:e]) < 6 and keys[s]:
            out += "X"
        else:
            out += "".join("X" if keys[i] else "." for i in range(s, e))
    return out


def _observe(points: list) -> list:
    """Each code point's signature: what tokenizers makes of each probe."""
    from tokenizers import normalizers

    from hybridsql.embedding import darts

    k1 = normalizers.Precompiled(darts.charsmap({b"a": b"b"})).normalize_str
    rules = {bytes([b]): b"X" for b in range(1, 256) if b not in (0x0A, 0x61)}
    k2 = normalizers.Precompiled(darts.charsmap(rules)).normalize_str
    seen = []
    for j, probe in enumerate(_PROBES):
        text = "\n".join("".join(ch if p is _C else p for p in probe) for ch in points)
        out = (k1 if j == 0 else k2)(text).split("\n")
        if j == 0:
            out = ["joined" if o == "b" else "apart" for o in out]
        else:
            out = ["".join(c if c == "X" else "." for c in o) for o in out]
        seen.append(out)
    return list(zip(*seen, strict=True))


def grapheme_classes() -> list:
    """Each code point's class and White_Space bit, as tokenizers reads them."""
    from tokenizers import pre_tokenizers

    fits: dict = {}
    for size in (1, 2, 3, 4):
        for keyed in (False, True):
            for cls in range(G_CR):  # CR and LF are the two code points GB3 names
                joined = not breaks([G_OTHER, cls])[1] and size < 5
                sig = ("joined" if joined else "apart",)
                sig += tuple(_predict(p, cls, size, keyed) for p in _PROBES[1:])
                fits.setdefault((size, keyed, sig), cls)
    probed = [
        c
        for c in range(0x110000)
        if not (0xD800 <= c <= 0xDFFF or c in (0x0A, 0x0D))
        and (c < 0x40000 or 0xE0000 <= c < 0xF0000 or c % 4096 == 0)
    ]
    table = [G_OTHER] * 0x110000
    table[0x0A], table[0x0D] = G_LF, G_CR
    unexplained = []
    for c, sig in zip(probed, _observe([chr(c) for c in probed]), strict=True):
        cls = fits.get((len(chr(c).encode()), c not in (0, 0x61), sig))
        if cls is None or (cls != G_OTHER and (0x40000 <= c < 0xE0000 or c >= 0xF0000)):
            unexplained.append(f"U+{c:04X} {sig}")
        else:
            table[c] = cls
    for ch, cls in _ANCHOR.items():
        if table[ord(ch)] != cls:
            unexplained.append(f"the anchor U+{ord(ch):04X} is {G_NAMES[table[ord(ch)]]}")
    if unexplained:
        sys.exit(
            "unicode_tables.py: tokenizers' clusters differ from UAX #29 at "
            + ", ".join(unexplained[:20])
        )
    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    text = "a" + "a".join(points) + "a"
    covered = bytearray(len(text))
    for _, (lo, hi) in pre_tokenizers.WhitespaceSplit().pre_tokenize_str(text):
        covered[lo:hi] = b"\1" * (hi - lo)
    for at in range(1, len(text), 2):
        if not covered[at]:
            table[ord(text[at])] |= G_WHITE
    return table


def render_graphemes(table: list) -> str:
    import collections

    blocks: dict = {}
    stage1, stage2 = [], []
    for start in range(0, 0x110000, BLOCK):
        block = tuple(table[start : start + BLOCK])
        if block not in blocks:
            blocks[block] = len(blocks)
            stage2.extend(block)
        stage1.append(blocks[block])
    count = collections.Counter(c & ~G_WHITE for c in table)
    lines = [
        "/* Generated by scripts/unicode_tables.py: do not edit. Each code point's extended",
        "** grapheme cluster class (UAX #29, as the tokenizers library's Precompiled normalizer",
        "** cuts a text into clusters) and whether it is White_Space, read from tokenizers (see",
        "** the script). */",
        "#ifndef HYBRIDSQL_GRAPHEME_TABLES_H",
        "#define HYBRIDSQL_GRAPHEME_TABLES_H",
        "#include <stdint.h>",
        "",
    ]
    for i, (name, meaning) in enumerate(zip(G_NAMES, G_MEANING, strict=True)):
        lines.append(f"#define HS_G_{name} {i} /* {meaning}: {count[i]} code points */")
    lines += [
        f"#define HS_G_WHITE 0x{G_WHITE:X} /* the bit of a White_Space code point */",
        f"#define HS_G_BLOCK {BLOCK}",
        "",
        f"static const uint16_t hs_g_stage1[{len(stage1)}] = {{",
    ]
    lines += wrap([str(b) for b in stage1])
    lines += ["};", "", f"static const uint8_t hs_g_stage2[{len(stage2)}] = {{"]
    lines += wrap([str(r) for r in stage2])
    lines += ["};", "", "#endif", ""]
    return "\n".join(lines)


def wrap(items: list, width: int = 100) -> list:
    out, line = [], " "
    for item in items:
        if len(line) + len(item) + 2 > width:
            out.append(line.rstrip())
            line = " "
        line += " " + item + ","
    if line.strip():
        out.append(line.rstrip())
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a header is stale")
    parser.add_argument("--diff", action="store_true", help="list where the two sides differ")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)  # hybridsql.embedding.darts writes the probes' charsmaps
    written = {HEADER: build(args.diff), GRAPHEME_HEADER: render_graphemes(grapheme_classes())}
    stale = 0
    for path, text in written.items():
        if args.check:
            with open(path, encoding="utf-8") as f:
                if f.read() != text:
                    print(f"{path} is stale: run python scripts/unicode_tables.py", file=sys.stderr)
                    stale = 1
            continue
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return stale


if __name__ == "__main__":
    sys.exit(main())
