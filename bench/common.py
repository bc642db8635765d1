"""What the benchmark scripts share: the results folder, fresh files, connections with
sqlite-vec beside hybridsql, and the SciFact hybrid files with the local model's vectors.

bench/run.py, bench/vectors.py and bench/page_size.py import this module and never one another.
"""

import json
import os
import re

import apsw
import numpy as np
import scifact

import hybridsql
from hybridsql.db.schema import ensure_schema
from hybridsql.embedding.embedder import Embedder, LocalProvider
from hybridsql.indexing.index import HybridIndex, transaction

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
SCIFACT = scifact.DATA
MODEL = LocalProvider.model_id  # the hybrid files' vectors: the local model's, with noise
MMAP = 1 << 36


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def connect(path, mmap=False):
    """hybridsql's extension and sqlite-vec in one connection; ``mmap``: pragma mmap_size."""
    import sqlite_vec  # noqa: PLC0415 (only the scripts that compare with it install it)

    conn = hybridsql.connect(path, backend="extension")
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    conn.enable_load_extension(False)
    conn.execute(f"pragma mmap_size = {MMAP if mmap else 0}")
    return conn


def remove_db(path):
    """Removes a database file and its -wal and -shm, those that exist."""
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


def fresh_file(path, page_size=None):
    """Removes what a killed run left at ``path``; with ``page_size``, makes the file with that
    page size (fixed when the first page is written)."""
    remove_db(path)
    if page_size is not None:
        first = apsw.Connection(path)
        first.execute(f"pragma page_size = {page_size}; pragma journal_mode = wal")
        first.close()


# -- SciFact hybrid files -------------------------------------------------------------------


def scifact_texts():
    with open(os.path.join(SCIFACT, "corpus.jsonl")) as f:
        docs = [json.loads(line) for line in f]
    pieces = []
    for d in docs:
        sentences = re.split(r"(?<=\.)\s+", d["text"])
        for i in range(0, len(sentences), 2):
            pieces.append((d["_id"], d["title"] + "\n" + " ".join(sentences[i : i + 2])))
    return pieces


def upgraded(path):
    """A file kept from an earlier run, brought to this hybridsql's schema (as `hybridsql index`
    would), so that the read-only `hybridsql search` of the benchmark can open it."""
    conn = connect(path, mmap=False)
    ensure_schema(conn)
    conn.close()
    return path


def build_hybrid_db(n, doc_vectors, page_size=None):
    """n chunks of SciFact text; each chunk's vector is its abstract's, with a little noise.
    ``page_size``: the file's, in a file of its own (else what hybridsql.connect makes)."""
    name = f"hybrid_{n}.db" if page_size is None else f"hybrid_{n}_{page_size // 1024}k.db"
    path = os.path.join(RESULTS, name)
    if os.path.exists(path):
        return upgraded(path)
    pieces = scifact_texts()
    rng = np.random.default_rng(3)
    fresh_file(path + ".part", page_size)
    conn = connect(path + ".part", mmap=False)
    ensure_schema(conn)
    conn.execute(
        "create virtual table vec_chunks using vec0(embedding float[384] distance_metric=cosine)"
    )
    with transaction(conn):
        for i in range(n):
            doc, text = pieces[i % len(pieces)]
            day = 1 + i % 28
            path_name = f"memory/2026-10-{day:02d}.md" if i % 3 else f"notes/{doc}.md"
            conn.execute(
                "insert into chunks(id, kind, path, text, created_at)"
                " values (?, 'document', ?, ?, 0)",
                (
                    i + 1,
                    path_name,
                    text if i < len(pieces) else f"{text} (copy {i // len(pieces)})",
                ),
            )
            v = doc_vectors[doc] + rng.normal(0, 0.01, 384).astype(np.float32)
            conn.execute(
                "insert into vectors(chunk_id, vector, model_id, kind)"
                " values (?, ?, ?, 'document')",
                (i + 1, v.tobytes(), MODEL),
            )
            conn.execute(
                "insert into vec_chunks(rowid, embedding) values (?, ?)", (i + 1, v.tobytes())
            )
    conn.close()
    os.rename(path + ".part", path)
    return path


def abstract_vectors(log):
    """Each SciFact abstract's vector from the local model (bench/scifact.py's index)."""
    scifact_db = scifact.DB
    if not os.path.exists(scifact_db):
        log("  building bench/results/scifact-windows.db first (bench/scifact.py)")
        scifact.open_index().close()
    src = hybridsql.connect(scifact_db)
    out = {
        path: np.frombuffer(blob, dtype="<f4")
        for path, blob in src.execute(
            "select c.path, v.vector from chunks c join vectors v on v.chunk_id = c.id"
        )
    }
    src.close()
    return out


def scifact_queries():
    with open(os.path.join(SCIFACT, "queries.jsonl")) as f:
        return [json.loads(line)["text"] for line in f][:50]


def open_fixed(path, queries, qvecs, texts=(), vecs=()):
    """A HybridIndex whose embedder knows the benchmark's texts (the local model's vectors made
    beforehand), so that no time is spent embedding."""
    idx = HybridIndex(path, embedder="none")
    idx.embedder = Embedder(Fixed([*queries, *texts], [*qvecs, *vecs]), idx.conn)
    idx.searcher.embedder = idx.embedder
    return idx


class Fixed:
    """A provider that knows the benchmark's query vectors (made by the local model)."""

    model_id, dims = MODEL, 384

    def __init__(self, texts, vecs):
        self.table = dict(zip(texts, vecs, strict=True))

    def embed(self, texts):
        return np.stack([self.table[t] for t in texts])
