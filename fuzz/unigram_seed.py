"""Writes fuzz_unigram's seeds, fuzz/corpus/unigram/*, and with --section PATH the section the
harness reads texts with (fuzz/build.sh writes fuzz/build/unigram.bin so).

The section (hybridsql/embedding/tokenizer_section.py's, XLM-R's in shape): XLM-R's charsmap as
hybridsql carries it (hybridsql/data/xlmr-charsmap.bin), 3,000 pieces of eight scripts with
float32 scores, the added tokens <s> <pad> </s> <unk> and <mask> (lstrip). A seed is the
harness's five control bytes (fuzz_unigram.c), then either only a prefix and a text (read with
that section), or a small section of its own (a few hundred pieces, a charsmap of a few hundred
rules built by hybridsql/embedding/darts.py, each normalizer step and Metaspace flag) and a text.

    python fuzz/unigram_seed.py                      # from the repository root
    python fuzz/unigram_seed.py --section fuzz/build/unigram.bin
"""

import argparse
import os
import random
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # hybridsql from the source tree: pure Python here

from hybridsql.embedding import darts  # noqa: E402
from hybridsql.embedding.tokenizer_section import XLMR_CHARSMAP, unigram_section  # noqa: E402

META = "\u2581"
LETTERS = (
    "abcdefghijklmnopqrstuvwxyzéèàçñüößœ"
    + "абвгдежзийклмнопрстуфхцчшщыэюя"
    + "αβγδεζηθικλμνξοπρστυφχψω"
    + "ابتثجحخدذرزسشصضطظعغفقكلمنهوي"
    + "कखगघचछजझटठडढणतथदधनपफबभमयरलवशसह्ािीुूेैोौ"
    + "กขคงจฉชซญดตถทธนบปผพฟภมยรลวศษสหอฮะัาำิีึืุูเแโใไ่้๊๋"
    + "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年"
    + "가나다라마바사아자차카타파하고노도로모보소오조초"
)
TEXTS = [
    "Hello world, this is a test.",
    "  leading and trailing  ",
    "café naïve e\u0301\u0301 Ａ\u0301",
    "日本語のテキスト 中文 한국어 \u1100\u1161",
    "<s>hello</s> <mask>  <mask>x<unk><pad>",
    "😀👍🏽👨\u200d👩\u200d👧🇫🇷🇩🇪 #️⃣",
    "\x00abc\tdef\r\n\u3000\u200b\u2028x\ufeff",
    "मनुष्य क्षत्रिय ภาษาไทย العربية",
    "ｶﾞｷﾞ ㍿ ﷺ ﬁ",
    "x" * 300,
]


def vocabulary(count: int, seed: int) -> list:
    rng = random.Random(seed)
    pieces = {}
    for c in LETTERS:
        pieces[c] = None
        pieces[META + c] = None
    while len(pieces) < count - 5:
        piece = "".join(rng.choices(LETTERS, k=rng.randint(2, 6)))
        pieces[META + piece if rng.random() < 0.5 else piece] = None
    pieces[META] = None
    scores = [struct.unpack("<f", struct.pack("<f", rng.uniform(-16, -3)))[0] for _ in pieces]
    out = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    return out + list(zip(pieces, scores, strict=True)) + [("<mask>", 0.0)]


def spec(vocab: list, charsmap: bytes, normalizers: list, scheme: str, split: bool) -> dict:
    import base64

    steps = [{"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()}]
    steps += normalizers
    added = [(0, "<s>"), (1, "<pad>"), (2, "</s>"), (3, "<unk>"), (len(vocab) - 1, "<mask>")]
    return {
        "added_tokens": [
            {"id": i, "content": c, "lstrip": c == "<mask>", "rstrip": False} for i, c in added
        ],
        "normalizer": {"type": "Sequence", "normalizers": steps},
        "pre_tokenizer": {
            "type": "Metaspace",
            "replacement": META,
            "prepend_scheme": scheme,
            "split": split,
        },
        "model": {"type": "Unigram", "unk_id": 3, "vocab": vocab},
    }


SPACES = {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}
SPACES_META = {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": META}
STRIP = [{"type": "Strip", "strip_left": left, "strip_right": right} for left, right in
         ((True, False), (False, True), (True, True))]  # fmt: skip


def big_section() -> bytes:
    return unigram_section(
        spec(vocabulary(3000, 1), XLMR_CHARSMAP.read_bytes(), [SPACES], "always", True)
    )


def small_sections() -> list:
    rules = darts.charsmap_rules(XLMR_CHARSMAP.read_bytes())
    rng = random.Random(2)
    keys = sorted(rules)
    chosen = {k: rules[k] for k in rng.sample(keys, 300)}
    for c in " \t\n\r\u3000\u200b\ufffd\u2581\x01":
        chosen[c.encode()] = b" " if c not in "\x01" else b""
    small = darts.charsmap(chosen)
    out = []
    for i, (norm, scheme, split) in enumerate(
        [([SPACES], "always", True), ([STRIP[1], SPACES_META], "first", True),
         ([STRIP[0]], "never", False), ([STRIP[2], SPACES], "always", True)]
    ):  # fmt: skip
        out.append(
            unigram_section(spec(vocabulary(200 + 50 * i, 3 + i), small, norm, scheme, split))
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--section", help="write the harness's own section there, and no seeds")
    args = parser.parse_args()
    if args.section:
        with open(args.section, "wb") as f:
            f.write(big_section())
        return 0
    folder = os.path.join(HERE, "corpus", "unigram")
    os.makedirs(folder, exist_ok=True)
    for i, text in enumerate(TEXTS):
        prefix = b"query: " if i % 2 else b""
        head = bytes([0, 8, 3, i % 6, len(prefix)])
        with open(os.path.join(folder, f"text-{i}"), "wb") as f:
            f.write(head + prefix + text.encode())
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "##s", "##ing", ","]
    blob = b"".join(p.encode() + b"\0" for p in pieces + list("abcdefghijklmnopqrstuvwxyz"))
    wordpiece = struct.pack("<IIII", 1, 15, len(pieces) + 26, len(blob)) + blob
    head = bytes([1 | 4, 3, 3, 4, 0]) + struct.pack("<I", len(wordpiece))
    with open(os.path.join(folder, "wordpiece"), "wb") as f:
        f.write(head + wordpiece + "the things, [CLS] naïve 中文".encode())
    for i, sec in enumerate(small_sections()):
        for j, text in enumerate(TEXTS[i::4]):
            head = bytes([1 | (2 if j % 2 else 0), 3, 3, 2, 0]) + struct.pack("<I", len(sec))
            with open(os.path.join(folder, f"section-{i}-{j}"), "wb") as f:
                f.write(head + sec + text.encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
