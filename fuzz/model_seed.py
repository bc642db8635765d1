"""Writes fuzz_model's seeds, fuzz/corpus/model/tiny-*: model files of the real format
(hybridsql/embedding/model_file.py's pack) small enough for libFuzzer (about 20 KB, where the
real ones are 23 and 72 MB): 32 dims, 1 layer of 2 heads, an ffn of 32, a vocabulary of 75
WordPiece pieces with the special ones, random weights. Each seed is fuzz_model's control byte,
then the file:

- tiny-as-written, tiny-sealed: int8 weights, BERT's positions, mean pooling, two token types;
  the checksums left as written, and sealed again by the harness;
- tiny-q4: Q4_0 matrices and word table, a window of 64, float32 positions from an offset of 2
  (XLM-R's), no
  token types, CLS pooling, no L2, a query and a document prefix, half readable;
- tiny-id-not-utf8, tiny-id-unended: ids the loader must refuse (not UTF-8; 64 bytes, no NUL);
- tiny-v1-sealed (kept, not written here): a file of format 1, which the loader reads as
  all-MiniLM-L6-v2 is read.

    python fuzz/model_seed.py     # from the repository root, in a venv with hybridsql
"""

import os
import string
import struct

import numpy as np

from hybridsql.embedding import model_file
from hybridsql.embedding.model_file import Layer, Matrix, Model, Table

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["how", "do", "roll", "back", "deploy", "freeze", "the", "##ing", "##s", "."]
DIMS, FFN = 32, 32


def q4_blocks(rng, rows: int, cols: int) -> np.ndarray:
    """Random ggml Q4_0 blocks [rows][cols / 32][18]: a float16 scale, 16 bytes of codes."""
    blocks = rng.integers(0, 256, (rows, cols // 32, 18), dtype=np.uint8)
    scales = rng.uniform(0.001, 0.02, (rows, cols // 32)).astype("<f2")
    blocks[:, :, :2] = scales.view(np.uint8).reshape(rows, cols // 32, 2)
    return blocks


def tiny(q4: bool) -> bytes:
    letters = list(string.ascii_lowercase)
    pieces = SPECIAL + letters + ["##" + c for c in letters] + WORDS
    blob = b"".join(p.encode() + b"\0" for p in pieces)
    tokenizer = struct.pack("<4I", 1, 15, len(pieces), len(blob)) + blob
    rng = np.random.default_rng(33 + q4)
    vocab = len(pieces)

    def small(*shape):
        return rng.normal(0, 0.02, shape).astype(np.float32)

    def matrix(fan_in: int, fan_out: int) -> Matrix:
        if q4:
            return Matrix("q4_0", q4_blocks(rng, fan_out, fan_in), small(fan_out))
        codes = rng.integers(-127, 128, (fan_in, fan_out), dtype=np.int8)
        return Matrix("int8", codes, small(fan_out), rng.uniform(0.001, 0.01, fan_out).astype("f4"))

    ones = np.ones(DIMS, np.float32)
    shapes = [(DIMS, DIMS)] * 4 + [(DIMS, FFN), (FFN, DIMS)]
    layer = Layer(
        {role: matrix(*shape) for role, shape in zip(model_file.ROLES, shapes, strict=True)},
        (ones, small(DIMS)),
        (ones, small(DIMS)),
    )
    if q4:
        word = Table("q4_0", q4_blocks(rng, vocab, DIMS).reshape(vocab, -1))
        position = Table("f32", small(66, DIMS))
    else:
        word = Table("int8", rng.integers(-127, 128, (vocab, DIMS), dtype=np.int8),
                     rng.uniform(0.001, 0.01, vocab).astype("f4"))  # fmt: skip
        position = Table("int8", rng.integers(-127, 128, (256, DIMS), dtype=np.int8),
                         rng.uniform(0.001, 0.01, 256).astype("f4"))  # fmt: skip
    model = Model(
        model_id="tiny-fuzz-seed",
        architecture="xlm-roberta" if q4 else "bert",
        heads=2,
        eps=1e-12,
        word=word,
        position=position,
        token_types=np.zeros((0, DIMS), np.float32) if q4 else small(2, DIMS),
        norm=(ones, small(DIMS)),
        layers=[layer],
        tokenizer_kind="wordpiece",
        tokenizer=tokenizer,
        specials=(pieces.index("[CLS]"), pieces.index("[SEP]"), 0, 1),
        window=64 if q4 else 256,
        position_offset=2 if q4 else 0,
        pooling="cls" if q4 else "mean",
        normalise=not q4,
        readable=0.5,
        query_prefix="query: " if q4 else "",
        document_prefix="passage: " if q4 else "",
    )
    return model_file.pack(model)


def main() -> None:
    data, q4 = tiny(False), tiny(True)
    folder = os.path.join(HERE, "corpus", "model")
    os.makedirs(folder, exist_ok=True)
    not_utf8 = data[:128] + b"tiny-caf\xe9".ljust(64, b"\0") + data[192:]
    unended = data[:128] + b"t" * 64 + data[192:]
    seeds = {"tiny-as-written": (0, data), "tiny-sealed": (1, data), "tiny-q4": (1, q4)}
    seeds.update({"tiny-id-not-utf8": (1, not_utf8), "tiny-id-unended": (1, unended)})
    for name, (control, content) in seeds.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(bytes([control]) + content)


if __name__ == "__main__":
    main()
