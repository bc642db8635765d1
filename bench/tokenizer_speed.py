"""Speed of the C tokenizer (csrc/model/tokenizer.c) against the tokenizers library, as
LocalProvider reads texts (encode_windows, 8 windows), on the texts of tests/data: word pieces per
CPU-second over SciFact's 3,000 documents and the CJK notes, and the median time of one query
(SciFact's 200 queries, one call each). The library runs on one thread (RAYON_NUM_THREADS=1), as
the C does.

Run from the repository root: ``PYTHONPATH=. python bench/tokenizer_speed.py``.
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


def main() -> None:
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
