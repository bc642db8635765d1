"""Writes fuzz_model's seeds, fuzz/corpus/model/tiny-*: a model file of the real format
(hybridsql/model_file.py's pack) small enough for libFuzzer (about 20 KB, where the real one is
23 MB): 32 dims, 1 layer of 2 heads, an ffn of 32, 256 positions, a vocabulary of 75 pieces
with the special ones, random int8 weights. Each seed is fuzz_model's control byte, then the
file: one with the checksum left as written, one that the harness seals again, and two that it
seals with an id the loader must refuse (not UTF-8; 40 bytes with no NUL).

    python fuzz/model_seed.py     # from the repository root, in a venv with hybridsql
"""

import os
import string

import numpy as np

from hybridsql import model_file

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["how", "do", "roll", "back", "deploy", "freeze", "the", "##ing", "##s", "."]


def tiny() -> bytes:
    letters = list(string.ascii_lowercase)
    pieces = SPECIAL + letters + ["##" + c for c in letters] + WORDS
    vocab = b"".join(p.encode() + b"\0" for p in pieces)
    shape = {"dims": 32, "layers": 1, "heads": 2, "ffn": 32, "vocab": len(pieces)}
    shape.update({"positions": 256, "types": 2, "eps": 1e-12})
    rng = np.random.default_rng(33)
    arrays = {}
    for name, dtype, dims in model_file.sections(
        **{k: v for k, v in shape.items() if k not in ("heads", "eps")}, vocab_bytes=len(vocab)
    ):
        if dtype == "i1":
            arrays[name] = rng.integers(-127, 128, dims, dtype=np.int8)
        elif name.endswith("_scale"):
            arrays[name] = rng.uniform(0.001, 0.01, dims).astype(np.float32)
        elif name.endswith("norm_weight"):
            arrays[name] = np.ones(dims, np.float32)
        elif dtype == "f4":
            arrays[name] = rng.normal(0, 0.02, dims).astype(np.float32)
    return model_file.pack(shape, arrays, vocab, model_id="tiny-fuzz-seed")


def main() -> None:
    data = tiny()
    folder = os.path.join(HERE, "corpus", "model")
    os.makedirs(folder, exist_ok=True)
    not_utf8 = data[:40] + b"tiny-caf\xe9".ljust(40, b"\0") + data[80:]
    unended = data[:40] + b"t" * 40 + data[80:]
    seeds = {"tiny-as-written": (0, data), "tiny-sealed": (1, data)}
    seeds.update({"tiny-id-not-utf8": (1, not_utf8), "tiny-id-unended": (1, unended)})
    for name, (control, content) in seeds.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(bytes([control]) + content)


if __name__ == "__main__":
    main()
