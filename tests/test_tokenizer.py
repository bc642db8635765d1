"""The C tokenizer (csrc/model/tokenizer.c) gives the ids of the tokenizers library that LocalProvider
runs (hybridsql/data/tokenizer.json), id for id: on the real texts of tests/data and examples/,
on generated text (accents, CJK, emoji, combining marks, control characters, invalid UTF-8,
10,000-character words, empty strings), on every code point, and on long texts as
encode_windows reads them, window by window; hs_readable_share is readable_share."""

import functools
import json
import os
import random
import subprocess
import sys

import pytest
from conftest import ROOT, read_scifact
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridsql.db import _native
from hybridsql.embedding.local_model import _TOKENIZER, _tokenizer
from hybridsql.embedding.windows import encode_windows, readable_share

WINDOW = 254  # ids of the text in a window: LocalProvider.window less [CLS] and [SEP]


def pieces() -> list:
    """The vocabulary in id order, as the model file stores it."""
    with open(_TOKENIZER, encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    ordered = sorted(vocab, key=vocab.get)
    assert [vocab[p] for p in ordered] == list(range(len(ordered)))
    return ordered


VOCAB = _native.Vocab(pieces())
LIBRARY = _tokenizer()  # LocalProvider's: truncating at its window, no padding


def library_windows(text: str, most: int) -> list:
    """encode_windows' windows of ``text``: each window's ids and tokens, [CLS] and [SEP] off."""
    windows = encode_windows(LIBRARY, [text], most)[0]
    for w in windows:
        assert w.ids[0] == VOCAB.id("[CLS]") and w.ids[-1] == VOCAB.id("[SEP]")
    return [(w.ids[1:-1], w.tokens[1:-1]) for w in windows]


def check(data, most: int = 8) -> list:
    """Asserts that hs_tokenize gives encode_windows' ids for ``data`` (bytes, read as Python
    reads them with errors="replace"; or str), window by window, and readable_share's share."""
    raw = data.encode() if isinstance(data, str) else data
    text = raw.decode("utf-8", "replace")
    expected = library_windows(text, most)
    got = VOCAB.tokenize(raw, most, WINDOW * most)
    assert len(got) <= WINDOW * most
    windows = [got[i : i + WINDOW] for i in range(0, len(got), WINDOW)] or [[]]
    assert len(windows) == len(expected), text[:200]
    for i, (mine, (ids, _)) in enumerate(zip(windows, expected, strict=True)):
        assert mine == ids, f"window {i} of {text[:200]!r}"
    tokens = [t for _, ts in expected for t in ts]
    assert VOCAB.readable_share(got) == readable_share(tokens)
    return got


def real_texts() -> list:
    """(name, text) of every file of tests/data/docs, tests/data/cjk and examples/."""
    found = []
    for folder in ("tests/data/docs", "tests/data/cjk", "examples"):
        for base, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in sorted(files):
                path = os.path.join(base, name)
                with open(path, "rb") as f:
                    found.append((os.path.relpath(path, ROOT), f.read()))
    assert len(found) > 30
    return found


@pytest.mark.parametrize("name, text", real_texts(), ids=lambda x: x if isinstance(x, str) else "")
def test_the_real_files_tokenize_as_the_library_does(name, text):
    for most in (1, 8):
        check(text, most)


def test_scifact_tokenizes_as_the_library_does():
    """Every SciFact document (title and text, as the corpus is indexed) and query."""
    documents = read_scifact("corpus", 3000)
    queries = read_scifact("queries", 200)
    texts = [f"{d['title']}\n\n{d['text']}" for d in documents] + [q["text"] for q in queries]
    for text in texts:
        check(text)


def test_every_code_point_alone_and_inside_a_word():
    """Each code point as a word of its own and between two letters (where one that is dropped
    joins them, and punctuation splits them): 1,112,064 of them, 2,000 to a text."""
    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(points), 2000):
        part = points[start : start + 2000]
        for text in (" ".join(part), " ".join(f"a{c}b" for c in part)):
            expected = LIBRARY.encode(text, add_special_tokens=False)
            ids = expected.ids + [i for o in expected.overflowing for i in o.ids]
            assert VOCAB.tokenize(text.encode(), 1_000_000, 10**8) == ids, hex(ord(part[0]))


ACCENTED = "áàâäãåāăąçćčďéèêëēėęěğíìîïīįıĳĺľłñńňóòôöõøōőœŕřśšşťúùûüūůűųýÿźžżÀÉÎÕÜŸẞß"
COMBINING = "".join(chr(c) for c in range(0x300, 0x370)) + "\u1ab0\u20d0\u0f39\u302e\u302f"
CJK = "中文字数据库の検索は日本語한국어테스트、。「」（）！？ｈｅｌｌｏＡＢＣ１２３豈更𠀀𪜀"
EMOJI = "😀🥰👍🏽👨‍👩‍👧‍👦🏳️‍🌈🇯🇵✨❤️\u200d\ufe0f"
CONTROL = "\x00\x01\x07\x0b\x0c\x1b\x7f\x85\u200b\u200e\u2028\u2029\ufeff\ufffd\U000e0001"
SPACES = " \t\n\r\xa0\u1680\u2000\u2003\u202f\u3000"
SPECIAL = ["[CLS]", "[SEP]", "[UNK]", "[PAD]", "[MASK]", "[cls]", "[CLS", "[[SEP]]"]
MUSIC = "\U0001d15e\U0001d160\U0001d165\U0001d16d\U0001d16e\u1b44\u1734\u034f\u0f71\u0f72"

pieces_of_text = st.one_of(
    st.sampled_from(["the", "Tokenizer", "don't", "e-mail", "naïve", "café", "ÉCOLE", "ǅ", "İ"]),
    st.text(ACCENTED + "abcxyz", min_size=1, max_size=12),
    st.text("aeiou" + COMBINING, min_size=1, max_size=12),
    st.text(CJK, min_size=1, max_size=8),
    st.text(EMOJI, min_size=1, max_size=6),
    st.text(CONTROL + "ab", min_size=1, max_size=6),
    st.text(MUSIC + "xy", min_size=1, max_size=8),
    st.sampled_from(SPECIAL),
    st.text(SPACES, min_size=1, max_size=3),
    st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=6),
    st.builds(lambda c, n: c * n, st.sampled_from("aé中-x"), st.integers(95, 105)),
)
texts = st.lists(pieces_of_text, max_size=30).map("".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_generated_text_tokenizes_as_the_library_does(text):
    check(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts, st.lists(st.tuples(st.integers(0, 10**6), st.binary(min_size=1, max_size=4))))
def test_invalid_utf8_reads_as_python_replaces_it(text, cuts):
    """Bytes that are not UTF-8 (stray continuation bytes, truncated and overlong sequences,
    surrogates, beyond U+10FFFF) spliced anywhere, even inside a character."""
    raw = bytearray(text.encode())
    for place, junk in cuts:
        at = place % (len(raw) + 1)
        raw[at:at] = junk
    check(bytes(raw))


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe abc \x80 de\xc3",
        b"caf\xc3\xa9 \xe0\x80\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xf0\x9f\x98",
        b"\xc0\xaf\xc1\xbf\xf5\xf8\x88\x80\x80\x80 x\xe2\x82y",
        b"[CL\xffS] [SEP]\x00[UNK]",
    ],
)
def test_invalid_utf8_cases(raw):
    check(raw)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "\x00\x01\u200b",
        "\u0301\u0302",
        "[CLS]",
        "[SEP][SEP]",
        "a" * 100,
        "a" * 101,
        "é" * 100,
        "e\u0301" * 100,
        "한" * 34,  # 102 jamo once decomposed: [UNK]
        "한" * 33,
        "İ" * 101,
        "x" * 10_000,
        "word " + "é" * 10_000 + " word",
        ("y" * 10_000 + " ") * 3,
        "\U0001d160" * 60,
    ],
    ids=range(17),
)
def test_edges(text):
    check(text)


# Marks that survive strip_accents, of combining classes 7, 9, 216, 224, 226 and 230 (the classes
# NFD sorts them by), and nonspacing marks it drops: 0301, 0316, 0F39 and 0F71 are transparent
# to the sort, 034F (of class 0) ends a run.
KEPT_MARKS = "\U0001d16d\U0001d165\U0001d16e\u302e\u1b44\u08d4\u08e0\U00011c3f\U0001e000"
DROPPED_MARKS = "\u0301\u0316\u0f39\u034f\u0f71"


# No piece of the model's vocabulary holds one of the marks that survive, so their order cannot
# change its ids (a word with one is [UNK] whatever the order): the order is checked with the
# vocabulary and these marks added as pieces of their own, against the library given the same.
MARKED = [*pieces(), *KEPT_MARKS, *("##" + m for m in KEPT_MARKS)]


@functools.cache
def marked() -> tuple:
    from tokenizers import Tokenizer

    with open(_TOKENIZER, encoding="utf-8") as f:
        config = json.load(f)
    config["model"]["vocab"] = {p: i for i, p in enumerate(MARKED)}
    library = Tokenizer.from_str(json.dumps(config))
    library.no_truncation()
    library.no_padding()
    return _native.Vocab(MARKED), library


def check_marked(text: str) -> list:
    vocab, library = marked()
    expected = library.encode(text, add_special_tokens=False).ids
    assert vocab.tokenize(text.encode(), 8, 2032) == expected
    return expected


@settings(max_examples=300, deadline=None)
@given(st.text("ae" + KEPT_MARKS + DROPPED_MARKS + " \x01", max_size=12))
def test_the_marks_that_survive_are_sorted_as_nfd_sorts_them(text):
    check(text)
    check_marked(text)


@pytest.mark.parametrize(
    "text",
    [
        "x\U0001d16d\U0001d165",  # 226 then 216: swapped
        "x\U0001d16d\u0301\U0001d165",  # a dropped mark of class 230 between: swapped
        "x\U0001d16d\u034f\U0001d165",  # CGJ, a dropped mark of class 0, between: kept apart
        "x\U0001d16d\x01\U0001d165",  # a control character, dropped before NFD: swapped
        "x\u08d4\U0001e000\u1b44\u302e",  # 230, 230, 9, 224
        "x\U0001d16d \U0001d165",  # a space between: two words
    ],
)
def test_mark_order(text):
    check(text)
    assert VOCAB.id("[UNK]") not in check_marked(text)


def cut_texts(seed: int, most: int) -> list:
    """Texts made to end a prefix where the cut decides the ids (windows.py's _cut): words of over
    100 letters (one [UNK] each, so a window holds thousands of characters), runs of letters with
    no break for 256 characters (where the cut falls inside a word), breaks of each kind and
    characters that split words without being breaks (U+00A0, U+3001, "-", Hangul), invalid
    bytes (which count as Python counts them), all around the prefixes' lengths."""
    rng = random.Random(seed)
    parts = [
        lambda: b"a " * rng.randint(1, 300),
        lambda: b"ab" * rng.randint(1, 400),
        lambda: b"q" * rng.randint(95, 400),
        lambda: rng.choice([b" ", b"\t", b"\n", b"\r", "中".encode(), "\u9fff".encode()]),
        lambda: rng.choice(["\xa0", "\u3001", "-", "한", "\u3400", "é"]).encode(),
        lambda: rng.choice([b"\xf0\x9f\x98", b"\xe1\x80", b"\xff", b"\xc3", b"\xed\xa0\x80"]),
    ]
    texts = []
    for _ in range(40):
        text = b""
        while len(text) < rng.choice([512, 1024, 2048, 4096, 4600]) * most:
            text += rng.choice(parts)()
        texts.append(text)
    return texts


@pytest.mark.parametrize("most", [1, 2])
@pytest.mark.parametrize("seed", range(5))
def test_prefixes_are_cut_where_encode_windows_cuts_them(seed, most):
    for text in cut_texts(seed, most):
        check(text, most)


def test_invalid_bytes_count_as_python_counts_them_where_the_prefix_is_cut():
    """Two invalid sequences of 3 and 2 bytes, which Python reads as two characters: the run of
    letters is cut at character 512, 90 letters in, and the window is full."""
    check(b"a " * 210 + b"\xf0\x9f\x98\xe1\x80" + b"ab" * 500 + b" end", 1)


def test_a_prefix_cut_inside_a_word_gives_the_cut_word():
    """encode_windows reads 512 characters first: here 210 words and 46 pieces of a run of 1,000
    letters cut at character 512, which fill the window; the whole run would be one [UNK]."""
    text = "a " * 210 + "ab" * 500 + " end"
    got = check(text, 1)
    assert got[:210] == [VOCAB.id("a")] * 210 and VOCAB.id("[UNK]") not in got


def test_long_words_are_one_unk():
    """A word of over 100 characters, however long, is one [UNK]."""
    ids = VOCAB.tokenize(("z" * 10_000 + " the ").encode() * 2, 8, 2032)
    assert ids == [VOCAB.id("[UNK]"), VOCAB.id("the")] * 2


@functools.cache
def long_texts() -> list:
    """Texts over many windows: prose, CJK without spaces, words over 100 characters, breaks
    too far apart to cut at (the cut falls inside a word), megabytes."""
    rng = random.Random(33)
    documents = read_scifact("corpus", 300)
    prose = "\n\n".join(f"{d['title']}\n{d['text']}" for d in documents)
    cjk = "".join(rng.choice(CJK) for _ in range(40_000))
    hexes = "".join(rng.choice("0123456789abcdef") for _ in range(70_000))
    dashed = "-".join(
        rng.choice(["alpha", "beta", "gamma", "δέλτα", "x" * 120]) for _ in range(9000)
    )
    spaced = " ".join("w" * rng.randint(90, 140) for _ in range(800))
    mixed = "".join(
        rng.choice([ACCENTED, CJK, EMOJI, CONTROL, SPACES, COMBINING, "word "])[: rng.randint(1, 9)]
        for _ in range(30_000)
    )
    return [prose, prose[:5000], cjk, hexes, dashed, spaced, mixed, prose * 40]


@pytest.mark.parametrize("index", range(8))
@pytest.mark.parametrize("most", [1, 2, 3, 8])
def test_long_texts_give_encode_windows_ids(index, most):
    check(long_texts()[index], most)


def test_cap_stops_early_and_most_zero_reads_nothing():
    text = b"the quick brown fox jumps over the lazy dog " * 100
    ids = VOCAB.tokenize(text, 8, 2032)
    assert VOCAB.tokenize(text, 8, 7) == ids[:7]
    assert VOCAB.tokenize(text, 0, 2032) == []
    assert VOCAB.tokenize(b"", 8, 2032) == []


def test_the_vocabulary():
    assert [VOCAB.id(p) for p in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "##s")] == [
        0,
        100,
        101,
        102,
        1996,
        2015,
    ]
    assert VOCAB.id("no such piece") == -1
    assert VOCAB.id("") == -1


@pytest.mark.parametrize(
    "blob, n",
    [
        (b"[UNK]\0a\0", 3),  # fewer pieces than said
        (b"[UNK]\0a", 2),  # the last not terminated
        (b"[UNK]\0a\0b\0", 2),  # bytes left over
        (b"a\0b\0", 2),  # no [UNK]
        (b"", 1),
        (b"[UNK]\0", 0),
    ],
)
def test_a_bad_vocabulary_is_refused(blob, n):
    ffi, lib = _native._open()
    assert lib.hs_vocab_new(blob, len(blob), n) == ffi.NULL


def test_a_small_vocabulary():
    """Longest match first, "##" pieces inside a word, [UNK] for a word no pieces spell."""
    vocab = _native.Vocab(["[UNK]", "un", "##aff", "##able", "unaff", "##a", ",", "x"])
    assert vocab.tokenize(b"unaffable, unaffx", 8, 100) == [4, 3, 6, 0]


def test_the_unicode_tables_are_current():
    """csrc/model/unicode_tables.h is what scripts/unicode_tables.py writes now (from this Python's
    unicodedata, checked against the installed tokenizers library)."""
    script = os.path.join(ROOT, "scripts", "unicode_tables.py")
    done = subprocess.run(
        [sys.executable, script, "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
