"""SciFact nDCG@10 with bm25's k1 and b other than FTS5's (1.2, 0.75), keyword alone and fused.

    python bench/scifact_bm25.py

FTS5's bm25() fixes k1 and b. This reads, through a Python FTS5 function, each matching
document's length and each query term's count in it from the index bench/scifact.py builds
(--embedding windows), scores bm25 in numpy for every (k1, b) of the grid, keeps the 100 best
as the search does, and fuses them with the documents' cosines as the statement does (0.7 x the
cosine over the floor 0.25 + 0.3 x bm25 / the best bm25). k1 1.2 and b 0.75 reproduce the
statement's figures. Prints test / train for each cell.
"""

import json

import numpy as np
import scifact
from scifact_windows import cosines, fuse, ndcg

from hybridsql.search import keyword_plan

K1 = (0.6, 0.9, 1.2, 1.5, 2.0)
B = (0.3, 0.5, 0.6, 0.75, 0.9, 1.0)


def counts(api, *args):
    """[the row's length, each phrase's count in it], as FTS5's bm25() reads them."""
    found = [
        sum(len(column) for column in api.phrase_locations(p)) for p in range(api.phrase_count)
    ]
    return json.dumps([api.column_size(-1), *found])


def average_length(api, *args):
    return api.column_total_size(-1) / api.row_count


def term_counts(idx, queries, columns):
    """Per query: (documents, lengths, counts documents x terms, average length), or None."""
    conn = idx.conn
    conn.register_fts5_function("hs_counts", counts)
    conn.register_fts5_function("hs_average_length", average_length)
    path = dict(conn.execute("select id, path from chunks").fetchall())
    out = []
    for q in queries:
        plan = keyword_plan(q["text"])
        rows = (
            plan.match
            and conn.execute(
                "select rowid, hs_counts(chunks_fts), hs_average_length(chunks_fts)"
                " from chunks_fts where chunks_fts match ?",
                (plan.match,),
            ).fetchall()
        )
        if not rows:
            out.append(None)
            continue
        found = np.array([json.loads(r[1]) for r in rows], dtype=np.float64)
        documents = np.array([columns[path[r[0]]] for r in rows])
        out.append((documents, found[:, 0], found[:, 1:], rows[0][2]))
    return out


def keyword_scores(found, n_docs, n_rows, k1, b, pool=100):
    """(queries x documents) bm25 of the pool best, over the best, 0 elsewhere."""
    out = np.zeros((len(found), n_docs), dtype=np.float32)
    for row, item in zip(out, found, strict=True):
        if item is None:
            continue
        documents, length, tf, average = item
        df = (tf > 0).sum(0)
        idf = np.maximum(np.log((n_rows - df + 0.5) / (df + 0.5)), 1e-6)  # as FTS5's
        norm = k1 * (1 - b + b * length[:, None] / average)
        score = (idf * tf * (k1 + 1) / (tf + norm)).sum(1)
        top = np.lexsort((documents, -score))[:pool]
        row[documents[top]] = score[top] / score[top].max()
    return out


def main():
    scifact.require_data()
    docs = [d["_id"] for d in scifact.load_jsonl("corpus.jsonl")]
    columns = {doc: i for i, doc in enumerate(docs)}
    idx = scifact.open_index("windows")
    n_rows = idx.conn.execute("select count(*) from chunks").fetchone()[0]
    splits = {}
    for split in ("test", "train"):
        qrels = scifact.load_qrels(split)
        queries = [q for q in scifact.load_jsonl("queries.jsonl") if q["_id"] in qrels]
        vectors = idx.embedder.embed([q["text"] for q in queries])
        splits[split] = (
            qrels,
            [q["_id"] for q in queries],
            term_counts(idx, queries, columns),
            cosines(idx, vectors, columns),
        )
    print("SciFact nDCG@10, test / train\n")
    print("| k1 | b | keyword | hybrid (default) |")
    print("| --- | --- | --- | --- |")
    for k1 in K1:
        for b in B:
            cells = {"keyword": [], "hybrid": []}
            for qrels, ids, found, cos in splits.values():
                keyword = keyword_scores(found, len(docs), n_rows, k1, b)
                cells["keyword"].append(ndcg(keyword, ids, qrels, docs))
                cells["hybrid"].append(ndcg(fuse(cos, keyword), ids, qrels, docs))
            shown = [" / ".join(f"{x:.3f}" for x in v) for v in cells.values()]
            print(f"| {k1} | {b} | {shown[0]} | {shown[1]} |", flush=True)


if __name__ == "__main__":
    main()
