"""Ranking documents, not fragments: nDCG@10, R@10 and crowding of the top 10, per search mode.

    python bench/documents.py                        # XQuAD, SciFact chunked, SciFact
    python bench/documents.py --collection xquad     # one collection
    python bench/documents.py --variants             # and chunks as results, one result a file

For each collection: the default search, keyword, semantic and RRF fusion of the same bm25 and
MiniLM vectors (decay off, min_score 0, top 10); for each, nDCG@10 and R@10 over documents (a
document found again lower down counts once), and how many queries have more than two chunks of
one file in their top 10; then a paired bootstrap 95 % confidence interval for the default's
nDCG@10 minus RRF's.

XQuAD (bench/data/xquad): each article is written as a markdown file into
bench/results/xquad-files and the folder indexed as a user's files are, into
bench/results/xquad.db (the local model, a minute on 2 cores). scifact-chunks: SciFact's test
split over 1,227 of its abstracts (the first 1,000 and every one judged for a test query), each
cut into chunks of the window as a file is (3,083 chunks, bench/results/scifact-chunks.db, a few
minutes to embed). scifact: the test split on the index bench/scifact.py builds (one chunk an
abstract, read in windows; see there).
"""

import argparse
import json
import os
import random
import sys
from collections import Counter

from scifact import build, load_jsonl, load_qrels, ndcg_at_10, open_index, require_data

from hybridsql.indexing.index import HybridIndex

HERE = os.path.dirname(os.path.abspath(__file__))
XQUAD = os.path.join(HERE, "data", "xquad")
RESULTS = os.path.join(HERE, "results")
# What every configuration shares: the top 10, nothing cut by score, no decay.
BASE = {"min_score": 0.0, "limit": 10, "candidate_pool": 100, "decay": False}
CONFIGS = {
    "default": {},
    "keyword": {"mode": "keyword"},
    "semantic": {"mode": "semantic", "vector_floor": 0.0},
    "RRF": {"fusion": "rrf"},
}
# --variants: the other ways of ranking files (group_by_file is the strict one).
VARIANTS = {
    "default, by chunk (per_file 0)": {"per_file": 0},
    "RRF, by chunk": {"fusion": "rrf", "per_file": 0},
    "keyword, by chunk": {"mode": "keyword", "per_file": 0},
    "semantic, by chunk": {"mode": "semantic", "vector_floor": 0.0, "per_file": 0},
    "default, per_file 1": {"per_file": 1},
    "default, group_by_file": {"group_by_file": True},
    "RRF, group_by_file": {"fusion": "rrf", "group_by_file": True},
}
SCIFACT_FIRST = 1000  # scifact-chunks: the abstracts taken besides the judged ones
CROWDED = 2  # more chunks of one file than this in a top 10 is crowding
BOOTSTRAP = 10_000


def xquad():
    """(index, queries, qrels, document id of a path) of XQuAD, built on first use."""
    files = os.path.join(RESULTS, "xquad-files")
    os.makedirs(files, exist_ok=True)
    for doc in load_jsonl("corpus.jsonl", XQUAD):
        path = os.path.join(files, doc["_id"] + ".md")
        text = f"# {doc['title']}\n\n{doc['text']}\n"
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write(text)
    idx = HybridIndex(os.path.join(RESULTS, "xquad.db"), embedder="local")
    report = idx.index_folder(files)
    if report.chunks_written:
        print(f"xquad: {report.files_seen} files, {report.chunks_written} chunks", file=sys.stderr)
    return idx, load_jsonl("queries.jsonl", XQUAD), load_qrels(None, XQUAD), strip_md


def strip_md(path: str) -> str:
    return path.removesuffix(".md")


def scifact():
    """(index, queries, qrels, document id of a path) of SciFact's test split."""
    require_data()
    return open_index(), load_jsonl("queries.jsonl"), load_qrels("test"), str


def scifact_chunks():
    """SciFact's test split on a part of its abstracts cut into chunks of the window, each a
    file: the first SCIFACT_FIRST abstracts and every abstract judged for a test query."""
    require_data()
    qrels = load_qrels("test")
    judged = {doc for docs in qrels.values() for doc in docs}
    idx = HybridIndex(os.path.join(RESULTS, "scifact-chunks.db"), embedder="local")
    build(idx, chunked=True, keep=lambda i, d: i < SCIFACT_FIRST or d["_id"] in judged)
    return idx, load_jsonl("queries.jsonl"), qrels, str


COLLECTIONS = {"xquad": xquad, "scifact-chunks": scifact_chunks, "scifact": scifact}


def run(idx, queries, qrels, doc_of, options) -> dict:
    """Per judged query: nDCG@10, R@10, and whether a file has over CROWDED chunks in the top 10."""
    per_query = {}
    for q in queries:
        judged = qrels.get(q["_id"])
        if not judged:
            continue
        found = idx.search(q["text"], **{**BASE, **options})
        ranked = list(dict.fromkeys(doc_of(r.path) for r in found))
        relevant = {d for d, grade in judged.items() if grade > 0}
        chunks = Counter(r.path for r in found)
        per_query[q["_id"]] = (
            ndcg_at_10(ranked, judged),
            len(relevant.intersection(ranked[:10])) / len(relevant),
            max(chunks.values(), default=0) > CROWDED,
        )
    return per_query


def bootstrap(a: dict, b: dict, rounds: int = BOOTSTRAP, seed: int = 0) -> tuple:
    """Mean nDCG@10 of a minus b over the same queries, and its paired bootstrap 95 % CI."""
    ids = sorted(a)
    diffs = [a[i][0] - b[i][0] for i in ids]
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(rounds))
    return sum(diffs) / n, means[int(0.025 * rounds)], means[int(0.975 * rounds) - 1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collection", choices=list(COLLECTIONS), action="append")
    parser.add_argument("--variants", action="store_true", help="also the VARIANTS")
    parser.add_argument("--json", help="write every query's figures to this file")
    args = parser.parse_args()
    configs = {**CONFIGS, **(VARIANTS if args.variants else {})}
    dump = {}
    print("| collection | configuration | nDCG@10 | R@10 | queries with > 2 chunks of a file |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.collection or list(COLLECTIONS):
        idx, queries, qrels, doc_of = COLLECTIONS[name]()
        runs = {}
        for label, options in configs.items():
            runs[label] = got = run(idx, queries, qrels, doc_of, options)
            n = len(got)
            ndcg = sum(v[0] for v in got.values()) / n
            recall = sum(v[1] for v in got.values()) / n
            crowded = sum(v[2] for v in got.values())
            row = f"| {name} | {label} | {ndcg:.3f} | {recall:.3f} | {crowded} of {n} |"
            print(row, flush=True)
        for other in ("RRF", "RRF, by chunk"):
            if other in runs:
                mean, low, high = bootstrap(runs["default"], runs[other])
                ci = f"{mean:+.4f} (95 % CI {low:+.4f} to {high:+.4f})"
                print(f"| {name} | default - {other} | {ci} | | |")
        dump[name] = runs
        idx.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dump, f)


if __name__ == "__main__":
    main()
