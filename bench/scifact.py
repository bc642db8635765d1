"""nDCG@10 on SciFact for keyword, vector, hybrid and RRF search, through hybridsql's own search.

    python bench/scifact.py                 # test split, the default configurations
    python bench/scifact.py --split train --sweep   # the tuning grid, on train
    python bench/scifact.py --dated         # dated copies: decay on and off
    python bench/scifact.py --embedding truncated   # how a long abstract reaches its vector
    python bench/scifact.py --engines bench/results/scifact-vectors.npz  # C engine vs onnxruntime
    python bench/scifact.py --model multilingual-e5-small   # another local model's index
    python bench/scifact.py --model multilingual-e5-small --option vector_floor=0.8

The first run builds bench/results/scifact-windows.db (title + abstract per document, embedded
with the local model: about 15 minutes on 2 cores); later runs reuse it. ``--embedding``: each
abstract one chunk read in windows (the default), one chunk cut at the model's first 256 tokens
(as before windows), or cut into chunks of the window searched one result per document
(group_by_file), each in its own file. ``--engines`` reads the SciFact vectors of the C engine
(csrc/model/model.c) and of onnxruntime that ``bench/embed_engine.py --save`` wrote, indexes the
corpus with each, and compares the same searches: nDCG@10 of each, and the share of queries
whose top 10 is the same ids in the same order. ``--model NAME``: the local model (as
``hybridsql index --model``) that embeds the corpus and the queries, its index kept apart
(bench/results/scifact-windows-NAME.db); ``--option NAME=VALUE`` (repeatable): a search option
added to every configuration, as xquad.py takes it.
"""

import argparse
import datetime
import hashlib
import json
import os
import shutil
import sys
import time

import numpy as np
from measures import ndcg_at_10
from xquad import search_option

from hybridsql.files.chunking import chunk_markdown
from hybridsql.indexing.index import HybridIndex, transaction

HERE = os.path.dirname(os.path.abspath(__file__))
# The full set in the BEIR layout (the tests use the part of it in tests/data/scifact): the folder
# HYBRIDSQL_SCIFACT names, else ../shared/data/scifact beside the repository.
DATA = os.environ.get("HYBRIDSQL_SCIFACT") or os.path.join(
    HERE, "..", "..", "shared", "data", "scifact"
)
FILES = ("corpus.jsonl", "queries.jsonl", "qrels-test.tsv", "qrels-train.tsv")
# How a long abstract reaches its vector: (the local model's options, cut into chunks).
EMBEDDINGS = {
    "windows": ({}, False),
    "truncated": ({"max_windows": 1}, False),
    "chunks": ({}, True),
}
DB = os.path.join(HERE, "results", "scifact-windows.db")
DATED_DB = os.path.join(HERE, "results", "scifact-dated.db")
# --dated: each document gets a day of the year before NOW, the same on every run.
NOW = datetime.date(2026, 11, 22)

sys.path.insert(0, os.path.join(HERE, ".."))


def require_data():
    """Exits with one line saying where SciFact goes when a file of it is missing."""
    missing = [name for name in FILES if not os.path.isfile(os.path.join(DATA, name))]
    if missing:
        sys.exit(
            f"No SciFact in {os.path.abspath(DATA)} (no {', '.join(missing)}): put the full set"
            " there, or set HYBRIDSQL_SCIFACT to the folder that holds corpus.jsonl, queries.jsonl,"
            " qrels-test.tsv and qrels-train.tsv."
        )


def load_jsonl(name, folder=DATA):
    with open(os.path.join(folder, name)) as f:
        return [json.loads(line) for line in f]


def load_qrels(split, folder=DATA):
    """{query id: {document id: grade}} of ``qrels-<split>.tsv`` (BEIR's layout), or of
    ``qrels.tsv`` where ``split`` is None."""
    qrels = {}
    with open(os.path.join(folder, f"qrels-{split}.tsv" if split else "qrels.tsv")) as f:
        next(f)
        for line in f:
            q, doc, score = line.split()
            qrels.setdefault(q, {})[doc] = int(score)
    return qrels


def build(idx: HybridIndex, chunked: bool = False, keep=None) -> None:
    """Inserts every document (path = its id) as one chunk, or ``chunked`` into chunks of the
    embedder's window, each document a file under its title as heading (as ``# title`` would
    be); then embeds what is missing. ``keep(index, document)``: whether a document is taken."""
    corpus = load_jsonl("corpus.jsonl")
    if keep is not None:
        corpus = [d for i, d in enumerate(corpus) if keep(i, d)]
    if idx.conn.execute("select count(distinct path) from chunks").fetchone()[0] != len(corpus):
        most, overlap, counter = idx.chunking()
        with transaction(idx.conn):
            idx.conn.execute("delete from files")
            idx.conn.execute("delete from chunks")
            for d in corpus:
                text = (d["title"] + "\n" + d["text"]).strip()
                if not chunked:
                    idx.conn.execute(
                        "insert into chunks(kind, path, text, created_at)"
                        " values ('document', ?, ?, 0)",
                        (d["_id"], text),
                    )
                    continue
                idx.conn.execute(
                    "insert into files(root, path, sha256, size, mtime) values ('', ?, '', 0, 0)",
                    (d["_id"],),
                )
                file_id = idx.conn.last_insert_rowid()
                idx.conn.executemany(
                    "insert into chunks(kind, file_id, path, start_line, end_line, heading, text,"
                    " created_at) values ('document', ?, ?, ?, ?, ?, ?, 0)",
                    [
                        (file_id, d["_id"], c.start_line, c.end_line, d["title"], c.text)
                        for c in chunk_markdown(text, most, overlap, counter)
                    ],
                )
    started = time.monotonic()
    n = idx.embed_missing(batch=256)
    if n:
        print(f"embedded {n} chunks in {time.monotonic() - started:.0f}s", file=sys.stderr)


def open_index(embedding: str = "windows", model: str | None = None) -> HybridIndex:
    """The index of one way of embedding (EMBEDDINGS) by the local ``model`` (None: the
    default), built on first use."""
    options, chunked = EMBEDDINGS[embedding]
    path = DB if embedding == "windows" else DB.replace("windows", embedding)
    if model:
        path = path.replace(".db", f"-{model}.db")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    idx = HybridIndex(path, embedder="local", model=model, **options)
    build(idx, chunked)
    return idx


class Stored:
    """A provider that answers with vectors made before (text -> float32 vector): an index
    built with it, and its queries, have exactly one engine's vectors."""

    dims = 384

    def __init__(self, model_id: str, vectors: dict):
        self.model_id, self.vectors = model_id, vectors

    def embed(self, texts):
        return np.array([self.vectors[t] for t in texts], dtype=np.float32)


def compare_engines(saved: str, split: str) -> None:
    """The C engine's index against onnxruntime's: nDCG@10 of each configuration on ``split``
    and the share of queries (every query, and the judged ones) with the same top 10."""
    vectors = np.load(saved)
    corpus, queries = load_jsonl("corpus.jsonl"), load_jsonl("queries.jsonl")
    texts = [(d["title"] + "\n" + d["text"]).strip() for d in corpus]
    asked = [q["text"] for q in queries]
    if len(vectors["docs_engine"]) != len(texts) or len(vectors["queries_engine"]) != len(asked):
        sys.exit(
            f"{saved} has {len(vectors['docs_engine'])} documents and"
            f" {len(vectors['queries_engine'])} queries, SciFact {len(texts)} and {len(asked)}:"
            " write it with bench/embed_engine.py --docs 100000 --queries 100000 --save"
        )
    qrels = load_qrels(split)
    indexes = {}
    for side in ("engine", "onnx"):
        known = dict(zip(texts, vectors[f"docs_{side}"], strict=True))
        known.update(zip(asked, vectors[f"queries_{side}"], strict=True))
        path = os.path.join(HERE, "results", f"scifact-{side}.db")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.exists(path):
            os.remove(path)
        indexes[side] = HybridIndex(path, embedder=Stored(f"scifact-{side}", known))
        build(indexes[side])
    print(f"SciFact, the C engine's vectors against onnxruntime's; nDCG@10 on the {split} split")
    print(f" ({len(qrels)} judged queries), the same top 10 over all {len(queries)} queries\n")
    print("| configuration | nDCG@10 engine | nDCG@10 onnxruntime | same top 10 (all) |"
          " same top 10 (judged) |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: |")
    opts = {"min_score": 0.0, "limit": 10, "candidate_pool": 100, "half_life_days": 30.0}
    for name in ("hybrid, default", "vector (MiniLM cosine)"):
        options = {**opts, **CONFIGS[name]}
        scores = {side: [] for side in indexes}
        same, same_judged = 0, 0
        for q in queries:
            top = {
                side: [r.path for r in idx.search(q["text"], **options)]
                for side, idx in indexes.items()
            }
            same += top["engine"] == top["onnx"]
            if q["_id"] in qrels:
                same_judged += top["engine"] == top["onnx"]
                for side in indexes:
                    scores[side].append(ndcg_at_10(top[side], qrels[q["_id"]]))
        engine, onnx = (sum(scores[s]) / len(scores[s]) for s in ("engine", "onnx"))
        print(
            f"| {name} | {engine:.4f} | {onnx:.4f} | {same}/{len(queries)}"
            f" ({100 * same / len(queries):.1f} %) | {same_judged}/{len(scores['engine'])}"
            f" ({100 * same_judged / len(scores['engine']):.1f} %) |",
            flush=True,
        )
    for idx in indexes.values():
        idx.close()


def dated_path(doc_id: str) -> str:
    """``<id>/YYYY-MM-DD.md``: a file name temporal_decay() reads, a day from 1 to 365 days
    before NOW picked by the id's hash, so the dates spread evenly over the year."""
    days = 1 + int(hashlib.sha256(doc_id.encode()).hexdigest(), 16) % 365
    return f"{doc_id}/{NOW - datetime.timedelta(days=days)}.md"


def dated_copy() -> HybridIndex:
    """A copy of the built index with dated paths (vectors and text as they are)."""
    shutil.copy(DB, DATED_DB)
    idx = HybridIndex(DATED_DB, embedder="local")
    with transaction(idx.conn):
        rows = idx.conn.execute("select id, path from chunks").fetchall()
        idx.conn.executemany(
            "update chunks set path = ? where id = ?", [(dated_path(p), i) for i, p in rows]
        )
    return idx


def evaluate(idx, queries, qrels, **options):
    opts = {"min_score": 0.0, "limit": 10, "candidate_pool": 100, "half_life_days": 30.0}
    opts.update(options)
    scores = []
    for q in queries:
        if q["_id"] not in qrels:
            continue
        found = idx.search(q["text"], **opts)
        ranked = [r.path.split("/", 1)[0] for r in found]  # the id, dated or not
        scores.append(ndcg_at_10(ranked, qrels[q["_id"]]))
    return sum(scores) / len(scores)


CONFIGS = {
    "keyword (FTS5 bm25, porter)": {"mode": "keyword"},
    "vector (MiniLM cosine)": {"mode": "semantic", "vector_floor": 0.0},
    "hybrid, default": {},
    "hybrid, RRF": {"fusion": "rrf"},
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="test", choices=["test", "train"])
    parser.add_argument("--sweep", action="store_true", help="the tuning grid")
    parser.add_argument(
        "--dated",
        action="store_true",
        help=f"each document dated within the year before {NOW} (path <id>/YYYY-MM-DD.md):"
        " hybrid search with decay on and off",
    )
    parser.add_argument("--embedding", default="windows", choices=list(EMBEDDINGS))
    parser.add_argument(
        "--engines",
        metavar="NPZ",
        help="the C engine against onnxruntime, from the vectors bench/embed_engine.py --save"
        " wrote",
    )
    parser.add_argument("--model", help="the local model's name (default: the default model)")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        type=search_option,
        metavar="NAME=VALUE",
        help="a search option added to every configuration (repeatable)",
    )
    args = parser.parse_args()
    require_data()
    if args.engines:
        compare_engines(args.engines, args.split)
        return
    extra = dict(args.option)
    idx = open_index(args.embedding, args.model)
    queries, qrels = load_jsonl("queries.jsonl"), load_qrels(args.split)
    configs = dict(CONFIGS)
    if EMBEDDINGS[args.embedding][1]:
        configs = {name: {**options, "group_by_file": True} for name, options in configs.items()}
    if args.dated:
        idx.close()
        idx = dated_copy()
        now = NOW.isoformat()
        configs = {
            f"hybrid, decay (half-life 30 days, now {now})": {"now": now},
            "hybrid, decay (half-life 365 days)": {"now": now, "half_life_days": 365.0},
            "hybrid, no decay": {"decay": False},
        }
    if args.sweep:
        for floor in (0.0, 0.1, 0.2, 0.25, 0.3):
            for kn in ("max", "saturation"):
                configs[f"floor {floor}, keyword {kn}"] = {
                    "vector_floor": floor,
                    "keyword_norm": kn,
                }
    print(f"SciFact {args.split} split, {len(qrels)} judged queries, nDCG@10\n")
    print("| configuration | nDCG@10 |\n| --- | --- |")
    for name, options in configs.items():
        score = evaluate(idx, queries, qrels, **{**extra, **options})
        print(f"| {name} | {score:.3f} |", flush=True)


if __name__ == "__main__":
    main()
