"""Where a model's cosines lie on XQuAD, and the fusion's nDCG@10 over a grid of bands.

    python bench/xquad_band.py                   # e5's indexes, every language
    python bench/xquad_band.py --lang ru --lang zh --results DIR

For each question of a language, on the index bench/xquad.py built for ``--index`` (e5:
multilingual-e5-small's), the cosine of the query's vector to each file (its best chunk) and the
keyword search's score of each file it finds (``mode="keyword"``, keyword_norm max); then,
offline, the linear fusion (vector 0.7, keyword 0.3) re-scored over a grid of bands (floor,
ceiling): ``vector_score = max(0, (cosine - floor) / (ceiling - floor))``, a file under the floor
a candidate only where its words found it. Prints the cosines' percentiles (another paragraph's,
the question's own) and the grid's nDCG@10 per language. docs/benchmarks.md, "A vector's score
by its model's band", says what it chose.
"""

import argparse
import math
import os
import statistics
import sys

import numpy as np
import xquad

from hybridsql.indexing.index import HybridIndex

GRID = [(0.25, 1.0), (0.7, 1.0), (0.75, 1.0), (0.8, 1.0), (0.85, 1.0), (0.75, 0.9), (0.78, 0.9)]
GRID += [(0.8, 0.88), (0.8, 0.9), (0.8, 0.92), (0.8, 0.95)]


def candidates(lang: str, index: str, results: str) -> list:
    """Per question: (its paragraph's file, [(file, cosine, keyword score or None)])."""
    _, questions = xquad.load(lang)
    mode = xquad.MODES[index]
    db = os.path.join(results, lang, f"{mode.index}.db")
    if not os.path.exists(db):
        sys.exit(f"no index {db}: run bench/xquad.py --mode {index} --lang {lang} first")
    rows = []
    with HybridIndex(db, embedder=mode.embedder, model=mode.model, readonly=True) as idx:
        got = idx.conn.execute(
            "select c.path, v.vector from chunks c join vectors v"
            " on v.chunk_id = c.id and v.model_id = ?",
            (idx.embedder.model_id,),
        ).fetchall()
        paths = [p for p, _ in got]
        vectors = np.stack([np.frombuffer(v, dtype="<f4") for _, v in got])
        for question, number in questions:
            query = np.frombuffer(idx.searcher._embed(question)[0], dtype="<f4")
            best: dict = {}
            for path, cosine in zip(paths, (vectors @ query).tolist(), strict=True):
                best[path] = max(best.get(path, -2.0), cosine)
            found = idx.search(
                question, mode="keyword", limit=100, min_score=0.0, decay=False, per_file=1
            )
            words = {r.path: r.keyword_score for r in found}
            rows.append((xquad.file_name(number), [(p, c, words.get(p)) for p, c in best.items()]))
    return rows


def fused(files: list, floor: float, ceiling: float) -> list:
    scored = []
    for path, cosine, words in files:
        if words is None and cosine < floor:
            continue
        vector = max(0.0, (cosine - floor) / (ceiling - floor))
        scored.append((0.7 * vector + 0.3 * (words or 0.0), path))
    return [p for _, p in sorted(scored, key=lambda t: (-t[0], t[1]))]


def ndcg(ranked: list, relevant: str) -> float:
    return next((1 / math.log2(i + 2) for i, p in enumerate(ranked[:10]) if p == relevant), 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lang", action="append", choices=xquad.LANGUAGES, help="repeatable")
    parser.add_argument("--index", default="e5", choices=["e5", "minilm"])
    parser.add_argument("--results", default=xquad.RESULTS, metavar="DIR")
    args = parser.parse_args()
    xquad.require_data()
    langs = args.lang or list(xquad.LANGUAGES)
    data = {lang: candidates(lang, args.index, args.results) for lang in langs}
    for lang, rows in data.items():
        other = sorted(c for rel, files in rows for p, c, _ in files if p != rel)
        own = sorted(c for rel, files in rows for p, c, _ in files if p == rel)

        def at(xs, q):
            return xs[int(q * (len(xs) - 1))]

        print(
            f"{lang}: another paragraph's cosine median {at(other, 0.5):.3f}, 90th"
            f" {at(other, 0.9):.3f}; its own paragraph's 10th {at(own, 0.1):.3f}, median"
            f" {at(own, 0.5):.3f}"
        )
    print("\n| floor | ceiling | " + " | ".join(langs) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in langs) + " |")
    for floor, ceiling in GRID:
        cells = [
            statistics.fmean(ndcg(fused(files, floor, ceiling), rel) for rel, files in data[lang])
            for lang in langs
        ]
        print(f"| {floor} | {ceiling} | " + " | ".join(f"{x:.3f}" for x in cells) + " |")


if __name__ == "__main__":
    main()
