"""The C embedding engine (csrc/model/model.c) against onnxruntime (tests/onnx_reference.py, what
LocalProvider ran before the engine): agreement, a query's time, and indexing chunks per
CPU-second.

    PYTHONPATH=. python bench/embed_engine.py
    PYTHONPATH=. python bench/embed_engine.py --files 100 --docs 300 --queries 300
    PYTHONPATH=. python bench/embed_engine.py --corpus /work/shared/data/markdown  # a worktree
    PYTHONPATH=. python bench/embed_engine.py --files 100000 --docs 100000 --queries 100000 \
        --agreement-only --worst 20 --save bench/results/scifact-vectors.npz  # everything

- Agreement: the cosine between the engine's vector and onnxruntime's for every chunk of the
  first --files markdown files of ../shared/data/markdown (cut as ``hybridsql index`` cuts them,
  by the token estimate) and the first --docs documents and --queries queries of SciFact
  (../shared/data/scifact, else tests/data/scifact): min and median, and the texts whose vector
  is zero on one side only.
- A query: p50 over the SciFact queries of one embedding's CPU time, one thread, tokenizing
  included: the engine's call against onnxruntime's warm call (OnnxModel) for the same text.
- Indexing: the markdown chunks embedded at 1 and 2 threads (the engine: LocalProvider.embed, one
  text a call on each thread; onnxruntime: OnnxModel.embed, a batch of --batch windows on each
  thread, for each --batch given), chunks per CPU-second of this process and per wall second.

The model file is made in a temporary folder by hybridsql/embedding/model_file.py. Prints markdown.
"""

import argparse
import glob
import gzip
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from hybridsql.db import _native
from hybridsql.embedding import convert, model_file
from hybridsql.embedding.embedder import LocalProvider
from hybridsql.files.chunking import chunk_markdown

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from onnx_reference import OnnxModel  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "data")
MARKDOWN = os.path.join(SHARED, "markdown")
# issue 33's target: the cosine of every text's two vectors at least this
TARGET = 0.99999
BATCH = 256  # texts between two progress lines
SCIFACT = [os.path.join(SHARED, "scifact"), os.path.join(HERE, "..", "tests", "data", "scifact")]


def markdown_chunks(corpus: str, files: int) -> list:
    paths = sorted(glob.glob(os.path.join(corpus, "**", "*.md"), recursive=True))[:files]
    if not paths:
        sys.exit(f"no markdown files in {os.path.abspath(corpus)}: name the corpus with --corpus")
    chunks = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            chunks += [c.text for c in chunk_markdown(f.read())]
    return chunks


def scifact(folders: list, name: str, count: int) -> list:
    """The first ``count`` records of SciFact's corpus or queries, from the first folder that
    has them."""
    for folder in folders:
        for path, opener in ((f"{name}.jsonl", open), (f"{name}.jsonl.gz", gzip.open)):
            if os.path.exists(os.path.join(folder, path)):
                with opener(os.path.join(folder, path), "rt", encoding="utf-8") as f:
                    records = [json.loads(line) for line in itertools.islice(f, count)]
                if name == "corpus":  # as bench/scifact.py indexes a document
                    return [(f"{r['title']}\n{r['text']}").strip() for r in records]
                return [r["text"] for r in records]
    sys.exit(f"no SciFact {name} in {folders}: name the folder with --scifact")


def agreement(model, onnx: OnnxModel, texts: list, name: str) -> tuple:
    """(cosines of the texts both sides embed, texts zero on one side only, the engine's
    vectors, onnxruntime's, the index in ``texts`` of each cosine). Every BATCH texts, a line
    on stderr says how far it got: a run cut short still tells what it measured."""
    ours, theirs = np.zeros((0, model.dims), np.float32), np.zeros((0, model.dims), np.float32)
    cosines, odd, where = [], 0, []
    with ThreadPoolExecutor(2) as pool:  # onnxruntime's side runs on two threads too
        for start in range(0, len(texts), BATCH):
            batch = texts[start : start + BATCH]
            a = np.array([np.frombuffer(v, np.float32) for v in pool.map(model.embed, batch)])
            b = np.asarray(onnx.embed(batch), np.float32)
            ours, theirs = np.concatenate([ours, a]), np.concatenate([theirs, b])
            for i in range(start, start + len(batch)):
                x, y = ours[i], theirs[i]
                if not x.any() or not y.any():
                    odd += x.any() != y.any()
                    continue
                cosines.append(float(x @ y) / float(np.linalg.norm(x) * np.linalg.norm(y)))
                where.append(i)
            print(
                f"{name}: {start + len(batch)} of {len(texts)},"
                f" min cosine {min(cosines, default=1):.7f},"
                f" {sum(c < TARGET for c in cosines)} below {TARGET}, {odd} zero on one side",
                file=sys.stderr,
                flush=True,
            )
    return cosines, odd, ours, theirs, where


def p50_ms(call, texts: list, repeat: int) -> float:
    """The median CPU time of this thread for one call, in ms (the machine may be busy: CPU
    time is what the call costs, not what other work made it wait)."""
    times = []
    for text in texts:
        call(text)  # warm: each text once before it is timed
        for _ in range(repeat):
            start = time.thread_time()
            call(text)
            times.append(time.thread_time() - start)
    return statistics.median(times) * 1000


def timed(provider, texts: list) -> tuple:
    """(CPU seconds of this process, wall seconds) of ``provider.embed(texts)``, warmed first."""
    provider.embed(texts[:8])
    cpu, wall = time.process_time(), time.perf_counter()
    provider.embed(texts)
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=MARKDOWN, help="the markdown corpus")
    parser.add_argument("--scifact", help="SciFact's folder (default: ../shared, else tests/data)")
    parser.add_argument("--files", type=int, default=50, help="markdown files (of 966)")
    parser.add_argument("--docs", type=int, default=200, help="SciFact documents (of 5183)")
    parser.add_argument("--queries", type=int, default=300, help="SciFact queries (of 1109)")
    parser.add_argument("--repeat", type=int, default=3, help="timings of each query")
    parser.add_argument(
        "--batch", default="4", help="onnxruntime's windows a run, indexing (a list: 4,32)"
    )
    parser.add_argument(
        "--agreement-only", action="store_true", help="no timings: the agreement table only"
    )
    parser.add_argument(
        "--every",
        type=int,
        default=1,
        help="every Nth markdown chunk only: a sample spread over the whole corpus",
    )
    parser.add_argument("--start", type=int, default=0, help="with --every: the first chunk")
    parser.add_argument("--worst", type=int, default=0, help="print the N texts of lowest cosine")
    parser.add_argument(
        "--save",
        help="write both engines' SciFact vectors to this .npz (bench/scifact.py --engines reads"
        " it)",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        path = model_file.write_model_file(
            os.path.join(folder, "minilm.hsmodel"), convert.minilm_bytes()
        )
        data = path.read_bytes()
    model = _native.Model(data)
    chunks = markdown_chunks(args.corpus, args.files)[args.start :: args.every]
    folders = [args.scifact] if args.scifact else SCIFACT
    docs, queries = scifact(folders, "corpus", args.docs), scifact(folders, "queries", args.queries)
    print(f"simd {_native.simd_path()}; model file {len(data):,} bytes; {os.cpu_count()} CPUs\n")

    print(
        f"| texts | count | min cosine | median cosine | below {TARGET} | zero on one side only |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    onnx = OnnxModel(threads=2)
    every, worst, saved = [], [], {}
    for key, name, texts in (  # SciFact first: its vectors are saved as soon as they are made
        ("docs", "SciFact documents", docs),
        ("queries", "SciFact queries", queries),
        (
            "markdown",
            f"markdown chunks ({args.files} files, every {args.every} from {args.start})",
            chunks,
        ),
    ):
        if not texts:
            continue
        cosines, odd, ours, theirs, where = agreement(model, onnx, texts, name)
        every += cosines
        worst += [(c, name, texts[i]) for c, i in zip(cosines, where, strict=True)]
        if key != "markdown":
            saved.update({f"{key}_engine": ours, f"{key}_onnx": theirs})
        if args.save and key == "queries":
            os.makedirs(os.path.dirname(os.path.abspath(args.save)), exist_ok=True)
            np.savez(args.save, **saved)
        below = sum(c < TARGET for c in cosines)
        print(
            f"| {name} | {len(texts)} | {min(cosines):.7f} | {statistics.median(cosines):.7f} |"
            f" {below} | {odd} |",
            flush=True,
        )
    below = sum(c < TARGET for c in every)
    print(
        f"| all | {len(every)} | {min(every):.7f} | {statistics.median(every):.7f} | {below} | |\n"
    )
    if args.worst:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(
            os.path.join(HERE, "..", "hybridsql", "data", "tokenizer.json")
        )
        tokenizer.no_truncation()
    for cosine, name, text in sorted(worst, key=lambda w: w[0])[: args.worst]:
        tokens = len(tokenizer.encode(text, add_special_tokens=False).ids)
        print(f"{cosine:.9f} {name}, {len(text)} characters, {tokens} tokens: {text[:100]!r}")
    if args.agreement_only:
        return

    one = OnnxModel(threads=1)
    ours = p50_ms(model.embed, queries, args.repeat)
    theirs = p50_ms(lambda t: one.embed([t]), queries, args.repeat)
    print("| a query, p50 CPU, one thread | engine ms | onnxruntime ms | onnxruntime / engine |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| {len(queries)} SciFact queries | {ours:.2f} | {theirs:.2f} | {theirs / ours:.2f} |\n")

    print(
        "| indexing | threads | onnxruntime batch | engine chunks/CPU-s |"
        " onnxruntime chunks/CPU-s | ratio | engine chunks/s | onnxruntime chunks/s |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for threads in (1, 2):
        ours_cpu, ours_wall = timed(LocalProvider(threads=threads), chunks)
        for batch in [int(b) for b in args.batch.split(",")]:
            theirs_cpu, theirs_wall = timed(OnnxModel(batch_size=batch, threads=threads), chunks)
            n = len(chunks)
            print(
                f"| {n} markdown chunks | {threads} | {batch} | {n / ours_cpu:.1f} |"
                f" {n / theirs_cpu:.1f} | {theirs_cpu / ours_cpu:.2f} | {n / ours_wall:.1f} |"
                f" {n / theirs_wall:.1f} |"
            )


if __name__ == "__main__":
    main()
