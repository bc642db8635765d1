"""hybridsql's LangChain store against langchain-community's SQLiteVec, through LangChain's own
interfaces, in one run.

    pip install ".[bench,langchain]" langchain-community
    python bench/frameworks.py                 # SciFact quality, then speed at 10k and 100k
    python bench/frameworks.py --sizes 10000   # speed at 10k only

Quality: SciFact's test queries (title + abstract a document), both stores given the same
vectors of the local model (embedded once and kept in bench/results/scifact-lc-vectors.npz), the
top 10 of our retriever's default search (the one hybrid statement) against SQLiteVec's
similarity_search: nDCG@10 of each and the paired bootstrap's 95 % interval of the difference.

Speed: N documents of random words with random unit vectors (the same for both, looked up, so
that no model's time is counted): add_documents in batches of 1,000, rows a second (of wall
time, and of this process's CPU time); then the
p50 of similarity_search (k = 10) over 50 queries, each store answering in its own file. The
stores take turns, a batch each, so that a busy machine slows both alike.
"""

import argparse
import gc
import hashlib
import os
import random
import statistics
import sys
import tempfile
import time

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

# This checkout's hybridsql, before anything imports one: scifact does, and an installed copy
# (another worktree's editable install, an old wheel) would otherwise be the one measured.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from measures import ndcg_at_10, paired_bootstrap  # noqa: E402
from scifact import load_jsonl, load_qrels, require_data  # noqa: E402

from hybridsql.integrations.langchain import HybridSQLVectorStore  # noqa: E402

VECTORS = os.path.join(HERE, "results", "scifact-lc-vectors.npz")


class Lookup(Embeddings):
    """Vectors made beforehand, by text: both stores get the very same ones."""

    def __init__(self, vectors: dict, model_id: str = "all-MiniLM-L6-v2-int8") -> None:
        self.vectors = vectors
        self.model_id = model_id

    def embed_documents(self, texts):
        return [self.vectors[t] for t in texts]

    def embed_query(self, text):
        if text not in self.vectors:  # SQLiteVec embeds a text of its own to learn the size
            return list(next(iter(self.vectors.values())))
        return self.vectors[text]


def key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def local_vectors(texts: list) -> dict:
    """The local model's vector of each text, from the cache file where it has them."""
    cached = {}
    if os.path.exists(VECTORS):
        with np.load(VECTORS) as f:
            cached = dict(zip(f["keys"].tolist(), f["vectors"], strict=True))
    missing = sorted({t for t in texts if key(t) not in cached})
    if missing:
        from hybridsql.embedding.embedder import LocalProvider

        started = time.monotonic()
        made = LocalProvider().embed(missing)
        print(
            f"embedded {len(missing)} texts in {time.monotonic() - started:.0f}s", file=sys.stderr
        )
        cached.update({key(t): v for t, v in zip(missing, made, strict=True)})
        os.makedirs(os.path.dirname(VECTORS), exist_ok=True)
        np.savez(VECTORS, keys=np.array(list(cached)), vectors=np.stack(list(cached.values())))
    return {t: cached[key(t)].tolist() for t in texts}


def sqlitevec(path: str, embedding: Embeddings):
    """langchain-community's SQLiteVec on a connection of pysqlite3 (as its own
    create_connection makes one: Python's sqlite3 here cannot load extensions)."""
    import pysqlite3.dbapi2 as sqlite3
    import sqlite_vec
    from langchain_community.vectorstores import SQLiteVec

    connection = sqlite3.connect(path)
    connection.row_factory = sqlite3.Row
    connection.enable_load_extension(True)
    sqlite_vec.load(connection)
    connection.enable_load_extension(False)
    return SQLiteVec(table="docs", connection=connection, embedding=embedding)


def quality() -> None:
    require_data()
    corpus = load_jsonl("corpus.jsonl")
    queries = {q["_id"]: q["text"] for q in load_jsonl("queries.jsonl")}
    qrels = load_qrels("test")
    texts = [(d["title"] + "\n" + d["text"]).strip() for d in corpus]
    asked = [queries[q] for q in qrels]
    embedding = Lookup(local_vectors(texts + asked))
    ids = [d["_id"] for d in corpus]
    # Removed at the end: the two stores take about 0.6 GB.
    with tempfile.TemporaryDirectory() as folder:
        ours = HybridSQLVectorStore(os.path.join(folder, "ours.db"), embedding)
        ours.add_texts(texts, [{"doc": i} for i in ids], ids=ids)
        theirs = sqlitevec(os.path.join(folder, "vec.db"), embedding)
        theirs.add_texts(texts, [{"doc": i} for i in ids])
        retriever = ours.as_retriever(k=10)
        a, b = [], []
        for q, judged in qrels.items():
            a.append(ndcg_at_10([d.id for d in retriever.invoke(queries[q])], judged))
            found = theirs.similarity_search(queries[q], k=10)
            b.append(ndcg_at_10([d.metadata["doc"] for d in found], judged))
        mean, low, high = paired_bootstrap(a, b)
        print(f"SciFact test, {len(a)} queries, {len(texts)} documents, the same local vectors")
        print(f"  nDCG@10 hybridsql retriever (hybrid, default) {statistics.mean(a):.3f}")
        print(f"  nDCG@10 SQLiteVec similarity_search           {statistics.mean(b):.3f}")
        print(f"  difference {mean:+.3f}, 95 % CI [{low:+.3f}, {high:+.3f}]")
        ours.close()


WORDS = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho"
    " sigma tau upsilon phi chi psi omega deploy cache python sqlite vector memory agent note"
).split()


def speed(n: int, dims: int = 384, batch: int = 1000, queries: int = 50) -> None:
    rng = random.Random(n)
    texts = [f"{i} " + " ".join(rng.choices(WORDS, k=24)) for i in range(n)]
    asked = [f"query {i} " + " ".join(rng.choices(WORDS, k=6)) for i in range(queries)]
    matrix = np.random.default_rng(n).standard_normal((n + queries, dims)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    embedding = Lookup(dict(zip(texts + asked, matrix.tolist(), strict=True)), "random")
    docs = [Document(page_content=t, metadata={"i": i}) for i, t in enumerate(texts)]
    # The benchmark's own data (millions of floats in lists) is not the stores' to traverse:
    # moved out of the garbage collector's sight, it no longer lands in whichever store's batch
    # a full collection happens to fall.
    gc.collect()
    gc.freeze()
    with tempfile.TemporaryDirectory() as folder:
        stores = {
            "hybridsql": HybridSQLVectorStore(os.path.join(folder, "ours.db"), embedding),
            "SQLiteVec": sqlitevec(os.path.join(folder, "vec.db"), embedding),
        }
        # The stores take turns, batch by batch, so that both meet the same load of the machine;
        # before each batch the file system writes out what is pending (not timed), so that a
        # store's fsync waits for its own writes only, not for the other's.
        # CPU time (this process's) is counted beside the wall time: on a machine that others
        # share it is what a store costs, whatever they run.
        spent = {name: [0.0, 0.0] for name in stores}
        for s in range(0, n, batch):
            for name, store in stores.items():
                os.sync()
                started, cpu = time.perf_counter(), time.process_time()
                store.add_documents(docs[s : s + batch])
                spent[name][0] += time.perf_counter() - started
                spent[name][1] += time.process_time() - cpu
        print(f"{n:,} documents of {dims} dimensions")
        for name, store in stores.items():
            times = []
            for q in asked:
                started = time.perf_counter()
                found = store.similarity_search(q, k=10)
                times.append(time.perf_counter() - started)
                assert len(found) == 10
            p50 = statistics.median(times) * 1000
            wall, cpu = (n / t for t in spent[name])
            print(f"  {name:10} add_documents {wall:9,.0f} rows/s ({cpu:7,.0f} of CPU)   ", end="")
            print(f"similarity_search p50 {p50:7.2f} ms")
        stores["hybridsql"].close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--no-quality", action="store_true", help="speed alone")
    args = parser.parse_args()
    if not args.no_quality:
        quality()
    for n in args.sizes:
        speed(n)


if __name__ == "__main__":
    main()
