"""Speed of the local embedder: model load time and texts per second, as a markdown table.

Run from the repository root: ``PYTHONPATH=. python bench/embed_speed.py``. The ~400-token
chunks are cut from the docstrings of the Python standard library (real English prose, no
download); the model reads the first 256 tokens of each.
"""

import argparse
import importlib
import inspect
import os
import time

from tokenizers import Tokenizer

from hybridsql.embedding.embedder import Embedder, LocalProvider
from hybridsql.embedding.local_model import _TOKENIZER

MODULES = [
    "argparse", "asyncio", "collections", "configparser", "datetime", "decimal", "email",
    "functools", "http.client", "http.server", "inspect", "json", "logging", "pathlib", "pickle",
    "re", "shutil", "socket", "sqlite3", "subprocess", "tarfile", "threading", "typing",
    "unittest", "urllib.request", "zipfile",
]  # fmt: skip


def chunks(count: int, tokens: int) -> list[str]:
    """``count`` pieces of stdlib documentation, ``tokens`` tokens each."""
    docs = []
    for name in MODULES:
        for obj in vars(importlib.import_module(name)).values():
            if inspect.isclass(obj) or inspect.isfunction(obj):
                docs.append(inspect.getdoc(obj) or "")
    text = "\n\n".join(doc for doc in docs if doc)
    tokenizer = Tokenizer.from_file(str(_TOKENIZER))
    tokenizer.no_truncation()
    offsets = tokenizer.encode(text, add_special_tokens=False).offsets
    starts = range(0, len(offsets) - tokens, tokens)
    return [text[offsets[i][0] : offsets[i + tokens - 1][1]] for i in starts][:count]


def rate(embed, texts: list[str], repeat: int) -> float:
    """Best texts per second over ``repeat`` runs (the machine may be busy with other work)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        embed(texts)
        best = min(best, time.perf_counter() - start)
    return len(texts) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=64, help="how many ~400-token chunks")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the best counts")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    provider = LocalProvider(batch_size=args.batch_size)
    start = time.perf_counter()
    provider.embed(["load the model"])
    load = time.perf_counter() - start

    long_texts = chunks(args.chunks, 400)
    short_texts = [f"note {i}: the user prefers dark mode in the editor" for i in range(512)]
    embedder = Embedder(provider)
    embedder.embed(long_texts)

    rows = [
        ("model load (first call: imports, ONNX session, tokenizer)", f"{load:.2f} s"),
        (
            f"{len(long_texts)} chunks of 400 tokens (read to 256)",
            f"{rate(provider.embed, long_texts, args.repeat):.1f} texts/s",
        ),
        (
            f"{len(short_texts)} sentences of ~15 tokens",
            f"{rate(provider.embed, short_texts, args.repeat):.0f} texts/s",
        ),
        (
            f"{len(long_texts)} chunks again, from the Embedder's LRU",
            f"{rate(embedder.embed, long_texts, args.repeat):.0f} texts/s",
        ),
    ]
    setup = f"batch size {args.batch_size}, {os.cpu_count()} CPUs, best of {args.repeat}"
    print(f"Local embedder, {setup}\n")
    print("| measure | value |\n| --- | --- |")
    for measure, value in rows:
        print(f"| {measure} | {value} |")


if __name__ == "__main__":
    main()
