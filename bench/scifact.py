"""nDCG@10 on SciFact for keyword, vector, hybrid and RRF search, through hybridsql's own search.

    python bench/scifact.py                 # test split, the default configurations
    python bench/scifact.py --split train --sweep   # the tuning grid, on train
    python bench/scifact.py --dated         # dated copies: decay on and off

The first run builds bench/results/scifact.db (title + abstract per document, embedded with the
local model: about 15 minutes on 2 cores); later runs reuse it.
"""

import argparse
import datetime
import hashlib
import json
import math
import os
import shutil
import sys
import time

from hybridsql.index import HybridIndex, transaction

HERE = os.path.dirname(os.path.abspath(__file__))
# The full set in the BEIR layout (the tests use the part of it in tests/data/scifact): the folder
# HYBRIDSQL_SCIFACT names, else ../shared/data/scifact beside the repository.
DATA = os.environ.get("HYBRIDSQL_SCIFACT") or os.path.join(
    HERE, "..", "..", "shared", "data", "scifact"
)
FILES = ("corpus.jsonl", "queries.jsonl", "qrels-test.tsv", "qrels-train.tsv")
DB = os.path.join(HERE, "results", "scifact.db")
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


def load_jsonl(name):
    with open(os.path.join(DATA, name)) as f:
        return [json.loads(line) for line in f]


def load_qrels(split):
    qrels = {}
    with open(os.path.join(DATA, f"qrels-{split}.tsv")) as f:
        next(f)
        for line in f:
            q, doc, score = line.split()
            qrels.setdefault(q, {})[doc] = int(score)
    return qrels


def build(idx: HybridIndex) -> None:
    """Inserts every document as one chunk (path = its id) and embeds what is missing."""
    have = idx.conn.execute("select count(*) from chunks").fetchone()[0]
    corpus = load_jsonl("corpus.jsonl")
    if have != len(corpus):
        with transaction(idx.conn):
            idx.conn.execute("delete from chunks")
            idx.conn.executemany(
                "insert into chunks(kind, path, text, created_at) values ('document', ?, ?, 0)",
                [(d["_id"], (d["title"] + "\n" + d["text"]).strip()) for d in corpus],
            )
    started = time.monotonic()
    n = idx.embed_missing(batch=256)
    if n:
        print(f"embedded {n} documents in {time.monotonic() - started:.0f}s", file=sys.stderr)


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


def ndcg_at_10(ranked, judged):
    dcg = sum(judged.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranked[:10]))
    ideal = sorted(judged.values(), reverse=True)[:10]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def evaluate(idx, queries, qrels, **options):
    opts = {"min_score": 0.0, "max_results": 10, "candidate_pool": 100, "half_life_days": 30.0}
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
    args = parser.parse_args()
    require_data()
    os.makedirs(os.path.dirname(DB), exist_ok=True)
    idx = HybridIndex(DB, embedder="local")
    build(idx)
    queries, qrels = load_jsonl("queries.jsonl"), load_qrels(args.split)
    configs = dict(CONFIGS)
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
        print(f"| {name} | {evaluate(idx, queries, qrels, **options):.3f} |", flush=True)


if __name__ == "__main__":
    main()
