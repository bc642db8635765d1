"""SciFact nDCG@10 of ways to score a document by its windows, outside the statement (a prototype).

    python bench/scifact_windows.py                 # test split, weights tuned on train
    python bench/scifact_windows.py --split train

Reads the indexes bench/scifact.py builds (--embedding windows, truncated and chunks), embeds
each document's windows after the first on their own (once, cached in
bench/results/scifact-window-vectors.npz: about 5 minutes on 2 cores), and fuses in numpy as
the search statement does: 0.7 x the cosine over the floor 0.25 + 0.3 x bm25 / the best bm25,
bm25 over the whole document (hybridsql's own keyword search, 100 candidates). A document whose
windows' cosines are cos_1..cos_n (cos_1 the first window's, the `truncated` vector) is scored
by its pooled vector (today), cos_1, max(cos_i), their mean, or (cos_1 + max cos_i) / 2.
The last rows read shorter windows: 126 word pieces every 63 (the length MiniLM was trained on),
embedded once and cached in bench/results/scifact-windows-126-63.npz (about 12 minutes).
"""

import argparse
import os
import sys

import numpy as np
import scifact
from tokenizers import Tokenizer

from hybridsql.embedding.local_model import _tokenizer
from hybridsql.embedding.windows import encode_windows

sys.path.insert(0, os.path.join(scifact.HERE, "..", "tests"))
from onnx_reference import session as onnx_session  # noqa: E402

CACHE = os.path.join(scifact.HERE, "results", "scifact-window-vectors.npz")
SHORT, STRIDE = 126, 63  # the short windows' word pieces, and how far apart they start
FLOORS = (0.2, 0.25, 0.3)
KEYWORD_WEIGHTS = (0.25, 0.3, 0.35, 0.4)


def embed_ids(session, seqs):
    """The local model's unit vectors of word-piece sequences ([CLS] ... [SEP] each)."""
    vecs = np.zeros((len(seqs), 384), dtype=np.float32)
    order = sorted(range(len(seqs)), key=lambda j: len(seqs[j]))
    for start in range(0, len(order), 32):
        batch = order[start : start + 32]
        ids = np.zeros((len(batch), max(len(seqs[j]) for j in batch)), dtype=np.int64)
        mask = np.zeros_like(ids)
        for r, j in enumerate(batch):
            ids[r, : len(seqs[j])], mask[r, : len(seqs[j])] = seqs[j], 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        mean = (session.run(None, feeds)[0] * mask[:, :, None]).sum(1) / mask.sum(1)[:, None]
        vecs[batch] = mean / np.linalg.norm(mean, axis=1, keepdims=True)
    return vecs


def window_vectors(idx):
    """(paths, vectors) of every window after the first, embedded alone as the model reads it."""
    if os.path.exists(CACHE):
        cached = np.load(CACHE)
        return cached["paths"], cached["vecs"]
    session, tokenizer = onnx_session(), _tokenizer()
    rows = idx.conn.execute("select path, text from chunks order by id").fetchall()
    windows = encode_windows(tokenizer, [text for _, text in rows], 8)
    flat = [(path, w) for (path, _), ws in zip(rows, windows, strict=True) for w in ws[1:]]
    vecs = embed_ids(session, [w.ids for _, w in flat])
    paths = np.array([path for path, _ in flat])
    np.savez(CACHE, paths=paths, vecs=vecs)
    return paths, vecs


def short_window_vectors(idx):
    """(paths, vectors) of windows of SHORT word pieces starting every STRIDE, the last one
    reaching the document's end."""
    cache = os.path.join(scifact.HERE, "results", f"scifact-windows-{SHORT}-{STRIDE}.npz")
    if os.path.exists(cache):
        cached = np.load(cache)
        return cached["paths"], cached["vecs"]
    session, tokenizer = onnx_session(), _tokenizer()
    whole = Tokenizer.from_str(tokenizer.to_str())
    whole.no_truncation()
    cls, sep = whole.token_to_id("[CLS]"), whole.token_to_id("[SEP]")
    rows = idx.conn.execute("select path, text from chunks order by id").fetchall()
    paths, seqs = [], []
    for (path, _), encoding in zip(rows, whole.encode_batch([t for _, t in rows]), strict=True):
        pieces = encoding.ids[1:-1]
        for start in range(0, max(1, len(pieces) - SHORT + STRIDE), STRIDE):
            paths.append(path)
            seqs.append([cls, *pieces[start : start + SHORT], sep])
    vecs = embed_ids(session, seqs)
    np.savez(cache, paths=np.array(paths), vecs=vecs)
    return np.array(paths), vecs


def cosines(idx, query_vectors, columns):
    """(queries x documents) cosine of each query with each chunk's vector, max per document."""
    rows = idx.conn.execute(
        "select c.path, v.vector from chunks c join vectors v on v.chunk_id = c.id"
    ).fetchall()
    out = np.full((len(query_vectors), len(columns)), -1.0, dtype=np.float32)
    sims = query_vectors @ np.stack([np.frombuffer(v, dtype=np.float32) for _, v in rows]).T
    np.maximum.at(out.T, [columns[p] for p, _ in rows], sims.T)
    return out


def fuse(cos, keyword, floor=0.25, keyword_weight=0.3):
    vector = np.where(cos >= floor, (cos - floor) / (1 - floor), 0.0)
    return (1 - keyword_weight) * vector + keyword_weight * keyword


def ndcg(scores, ids, judged, docs):
    """Mean nDCG@10 over the queries (rows of scores) that ``judged`` holds."""
    found = []
    for row, q in zip(scores, ids, strict=True):
        top = np.lexsort((np.arange(len(row)), -row))[:10]
        found.append(scifact.ndcg_at_10([docs[d] for d in top], judged[q]))
    return sum(found) / len(found)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="test", choices=["test", "train"])
    args = parser.parse_args()
    scifact.require_data()
    docs = [d["_id"] for d in scifact.load_jsonl("corpus.jsonl")]
    columns = {doc: i for i, doc in enumerate(docs)}
    qrels = {split: scifact.load_qrels(split) for split in ("train", "test")}
    queries = [q for q in scifact.load_jsonl("queries.jsonl") if q["_id"] in qrels[args.split]]
    tune = [q for q in scifact.load_jsonl("queries.jsonl") if q["_id"] in qrels["train"]]
    pooled, first, chunks = (scifact.open_index(e) for e in ("windows", "truncated", "chunks"))
    paths, later = window_vectors(pooled)
    short_paths, short = short_window_vectors(pooled)

    def signals(qs):
        vectors = pooled.embedder.embed([q["text"] for q in qs])
        keyword = np.zeros((len(qs), len(columns)), dtype=np.float32)
        for row, q in zip(keyword, qs, strict=True):
            options = {"mode": "keyword", "limit": 100, "min_score": 0.0}
            for r in pooled.search(q["text"], candidate_pool=100, **options):
                row[columns[r.path]] = r.keyword_score
        cos_1 = cosines(first, vectors, columns)
        rest = vectors @ later.T
        best_short = np.full_like(cos_1, -1.0)
        np.maximum.at(best_short.T, [columns[p] for p in short_paths], (vectors @ short.T).T)
        biggest = cos_1.copy()
        total, count = cos_1.copy(), np.ones(len(columns), dtype=np.float32)
        for j, path in enumerate(paths):
            d = columns[path]
            biggest[:, d] = np.maximum(biggest[:, d], rest[:, j])
            total[:, d] += rest[:, j]
            count[d] += 1
        return keyword, {
            "pooled vector (`windows`, today)": cosines(pooled, vectors, columns),
            "first window (`truncated`)": cos_1,
            "max over windows": biggest,
            "mean of the windows' cosines": total / count,
            "(first + max) / 2": (cos_1 + biggest) / 2,
            "max over `chunks` (title and ~250-token parts)": cosines(chunks, vectors, columns),
            "(first + max over `chunks`) / 2": (cos_1 + cosines(chunks, vectors, columns)) / 2,
            f"max over {SHORT}-piece windows": best_short,
            f"(first + max over {SHORT}-piece windows) / 2": (cos_1 + best_short) / 2,
        }

    train_keyword, train_cos = signals(tune)
    keyword, cos = signals(queries) if args.split == "test" else (train_keyword, train_cos)
    ids, tune_ids = [q["_id"] for q in queries], [q["_id"] for q in tune]
    print(f"SciFact {args.split} split, {len(queries)} judged queries, nDCG@10\n")
    print("| document's cosine | vector | hybrid (default) | hybrid, tuned on train |")
    print("| --- | --- | --- | --- |")
    for name, c in cos.items():
        floor, weight = max(
            ((f, w) for f in FLOORS for w in KEYWORD_WEIGHTS),
            key=lambda fw: ndcg(
                fuse(train_cos[name], train_keyword, *fw), tune_ids, qrels["train"], docs
            ),
        )
        print(
            f"| {name} | {ndcg(c, ids, qrels[args.split], docs):.3f}"
            f" | {ndcg(fuse(c, keyword), ids, qrels[args.split], docs):.3f}"
            f" | {ndcg(fuse(c, keyword, floor, weight), ids, qrels[args.split], docs):.3f}"
            f" (floor {floor}, keyword {weight}) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
