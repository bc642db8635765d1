"""The index file's size against the text it indexes, by table, on the real corpus.

    python bench/file_size.py                   # all of ../shared/data/markdown, stand-in vectors
    python bench/file_size.py --files 100       # the first 100 files (by path)
    python bench/file_size.py --files 100 --model   # the local model's own vectors

Chunks are cut as the local model's are (its tokenizer, 254 tokens); the vectors are the model's
with --model, else stand-ins of the same width drawn from each text's sha256: a vector's bytes do
not depend on its values, and the model takes about 18 minutes over the whole corpus on 2 cores.
Prints `hybridsql stats` of the file, and keeps it in bench/results/file_size.db.
"""

import argparse
import hashlib
import os
import shutil
import sys
import tempfile

import apsw
import numpy as np

from hybridsql.db import stats
from hybridsql.db.extension import connect
from hybridsql.embedding.embedder import LocalProvider
from hybridsql.indexing.index import HybridIndex

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "..", "shared", "data", "markdown")  # beside the checkout


class StandIn(LocalProvider):
    """LocalProvider's chunking, with a unit vector drawn from each text's sha256."""

    def embed(self, texts):
        out = np.empty((len(texts), self.dims), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dims)
            out[i] = v / np.linalg.norm(v)
        return out


def corpus_copy(source: str, limit: int | None, into: str) -> None:
    """The first ``limit`` markdown files of ``source`` (by path), copied to ``into``."""
    found = sorted(
        os.path.relpath(os.path.join(d, f), source)
        for d, _, files in os.walk(source)
        for f in files
        if f.endswith(".md")
    )
    for rel in found[:limit]:
        os.makedirs(os.path.join(into, os.path.dirname(rel)), exist_ok=True)
        shutil.copyfile(os.path.join(source, rel), os.path.join(into, rel))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=None, help="the first N files only")
    parser.add_argument("--model", action="store_true", help="the local model's vectors")
    parser.add_argument("--corpus", default=CORPUS)
    parser.add_argument("--db", default=os.path.join(HERE, "results", "file_size.db"))
    parser.add_argument("--page-size", type=int, default=None, help="a new file's page size")
    args = parser.parse_args()
    os.makedirs(os.path.dirname(args.db), exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(args.db + suffix):
            os.remove(args.db + suffix)
    if args.page_size:
        made = apsw.Connection(args.db)
        made.execute(f"pragma page_size = {args.page_size}; vacuum")
        made.close()
    with tempfile.TemporaryDirectory() as folder:
        corpus_copy(args.corpus, args.files, folder)
        provider = LocalProvider() if args.model else StandIn()
        with HybridIndex(args.db, embedder=provider) as index:
            report = index.index_folder(folder)
    conn = connect(args.db, readonly=True)
    found = stats.breakdown(conn)
    conn.close()
    print(
        f"{report.files_indexed} files, {report.chunks_written} chunks,"
        f" {'model' if args.model else 'stand-in'} vectors, {report.seconds} s",
        file=sys.stderr,
    )
    print("\n".join(stats.lines(found)))


if __name__ == "__main__":
    main()
