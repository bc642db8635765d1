"""What the trigram plan of schema 6 (a query's trigrams OR-ed, ranked by bm25) changes in CJK
keyword search, against schema 5's (its CJK runs AND-ed as verbatim phrases): a known-item check
on the same index, and the search statement's time.

    python bench/cjk.py                                   # tests/data/cjk
    python bench/cjk.py --corpus ../shared/data/markdown  # the real corpus's CJK chunks

The folder is indexed once (chunks cut as the local model's, stand-in vectors: keyword search
reads none); a copy is given schema 5's trigram tables, filled from the chunks with CJK text
(Thai, Lao, Myanmar and Khmer were not theirs), and searched as schema 5's code planned a query
(``phrase_plan`` below, its keyword_plan).
Queries are drawn from the CJK chunks (seeded): a CJK substring of 3 to 8 characters; the same
with an English word of the chunk; a CJK run of 1 or 2 characters with one or two of its English
words; a stretch of 9 to 20 CJK characters with every fourth left out (text that shares most of
a chunk's pieces, not written there word for word, as a question is); from a chunk without CJK,
one or two of its English words in CJK quotation marks 「」 (searched as words, by both); and
Chinese sentences that no chunk holds (FTS5 finds nothing, and LIKE reads every chunk). Each
query's known item is its chunk. Printed for each kind of query: how many, the mean overlap of
the two top-10 lists, how many lists are the same, the known item's hits@10 and MRR@10 before
and after, and the median and 95th-percentile time of the search statement alone (run again
once its search has run, the best of three), before and after, in ms.
"""

import argparse
import os
import random
import re
import shutil
import sys
import tempfile

from file_size import CORPUS, StandIn, corpus_copy
from xquad import statement_time

from hybridsql.db.extension import connect
from hybridsql.indexing.index import HybridIndex
from hybridsql.search import keywords, searcher

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "tests", "data", "cjk")
# Schema 5's class (hybridsql/db/schema.py at schema 5, CJK): its trigram tables' chunks, and
# the runs its plan searched.
CJK = "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\u3000-\u303f"
RUN = re.compile(f"[{CJK}]+")
LETTER = re.compile(r"[^\W_]")
PIECE = re.compile(f"[^\\s{CJK}]+")
CJK_WORD = re.compile(rf"[^\W_{CJK}]+")
WORD = re.compile(r"\b[A-Za-z]{4,}\b")
# Chinese sentences about nothing the corpus holds: no trigram of them is in it.
ABSENT = [
    "熊猫在竹林里慢慢地吃早饭",
    "今天下午的茶话会改到明天",
    "骆驼穿过沙漠需要几天时间",
    "火锅店的菜单上有十种蘸料",
    "月亮上的环形山是怎么形成的",
]

# Schema 5's trigram tables (over the chunks with CJK text), under this version's view names so
# that the copy opens as an index of this version. Nothing writes to the copy, so this version's
# triggers stay.
SCHEMA5 = f"""
drop table chunks_trigram; drop table memories_trigram;
drop view document_trigram_chunks; drop view memory_trigram_chunks;
create view document_trigram_chunks as select id, text from chunks
  where kind = 'document' and text glob '*[{CJK}]*';
create view memory_trigram_chunks as select id, text from chunks
  where kind = 'memory' and text glob '*[{CJK}]*';
create virtual table chunks_trigram using fts5(
  text, content='document_trigram_chunks', content_rowid='id', tokenize='trigram'
);
create virtual table memories_trigram using fts5(
  text, content='memory_trigram_chunks', content_rowid='id', tokenize='trigram'
);
insert into chunks_trigram(chunks_trigram) values ('rebuild');
insert into memories_trigram(memories_trigram) values ('rebuild');
"""


def phrase_plan(
    query, fts=True, prefix=False, tables=("chunks_fts", "chunks_trigram"), like_trigrams=False
):
    """Schema 5's keyword_plan, as its code was: a query with CJK letters went to the trigram
    table, its CJK runs and words AND-ed as verbatim phrases (runs under three characters left
    to LIKE); other text (Thai too) to the porter table, its words OR-ed. ``like_trigrams``,
    which the searcher passes today's keyword_plan, did not exist then and changes nothing."""
    bounded, k = keywords.bounded, keywords
    cjk_runs = bounded(dict.fromkeys(RUN.findall(query)))
    words: dict = {}
    stopwords: dict = {}
    for piece in dict.fromkeys(PIECE.findall(query)):
        parts = CJK_WORD.findall(piece)
        if not parts:
            continue
        word = tuple(bounded(parts, k.MAX_TERMS // 4))
        if len(word) == 1 and word[0].lower() in k.STOPWORDS:
            stopwords.setdefault(word)
        else:
            words.setdefault(word)
            if len(words) == k.MAX_TERMS:
                break
    kept = list(words or stopwords)[: k.MAX_TERMS]
    like_terms = bounded(cjk_runs + [w for piece in kept for w in piece if len(w) >= 3])
    if not fts:
        return k.KeywordPlan(None, None, like_terms)
    if any(LETTER.search(run) for run in cjk_runs) or (cjk_runs and not kept):
        terms = [t for t in cjk_runs + [" ".join(w) for w in kept] if len(t) >= 3]
        match = " AND ".join(k._quote(t) for t in terms) or None
        return k.KeywordPlan(tables[1], match, like_terms)
    terms = list(dict.fromkeys(k._fts_term(w, prefix) for w in kept))
    return k.KeywordPlan(tables[0], " OR ".join(terms) or None, like_terms, terms)


def queries(chunks: list, others: list, rng: random.Random, each: int) -> dict:
    """Up to ``each`` (query, known chunk id) pairs of every kind, from CJK chunks, and from
    ``others`` (chunks without CJK) English words in CJK quotation marks."""
    kinds: dict = {
        "cjk 3-8": [],
        "cjk 3-8 + word": [],
        "cjk 1-2 + words": [],
        "cjk 9-20, every 4th left out": [],
        "「words」": [],
    }
    tries = 0
    while min(len(v) for v in kinds.values()) < each and tries < 100 * each:
        tries += 1
        if others:
            oid, other = rng.choice(others)
            words = list(dict.fromkeys(WORD.findall(other)))
            if words:
                picked = rng.sample(words, min(len(words), rng.randint(1, 2)))
                kinds["「words」"].append((f"「{' '.join(picked)}」", oid))
        cid, text = rng.choice(chunks)
        runs = [r for r in RUN.findall(text) if len(r) >= 3 and LETTER.search(r)]
        words = list(dict.fromkeys(WORD.findall(text)))
        if not runs:
            continue
        run = rng.choice(runs)
        size = rng.randint(3, min(8, len(run)))
        start = rng.randrange(len(run) - size + 1)
        cjk = run[start : start + size]
        short = run[start : start + rng.randint(1, 2)]
        kinds["cjk 3-8"].append((cjk, cid))
        if len(run) >= 9:
            size = rng.randint(9, min(20, len(run)))
            start = rng.randrange(len(run) - size + 1)
            stretch = run[start : start + size]
            gapped = "".join(c for i, c in enumerate(stretch) if i % 4 != 3)
            kinds["cjk 9-20, every 4th left out"].append((gapped, cid))
        if words:
            kinds["cjk 3-8 + word"].append((f"{cjk} {rng.choice(words)}", cid))
            picked = rng.sample(words, min(len(words), rng.randint(1, 2)))
            kinds["cjk 1-2 + words"].append((" ".join([short, *picked]), cid))
    out = {k: list(dict.fromkeys(v))[:each] for k, v in kinds.items()}
    out["absent sentences"] = [(sentence, None) for sentence in ABSENT]
    return out


def search(idx, query: str, before: bool) -> tuple:
    """(the ids of the first 10 keyword results, the statement's time in seconds). ``before``:
    as schema 5's code planned it."""
    plan = searcher.keyword_plan
    if before:
        searcher.keyword_plan = phrase_plan
    try:
        found = idx.search(query, mode="keyword", limit=10, decay=False, per_file=0)
    finally:
        searcher.keyword_plan = plan
    return [r.id for r in found], statement_time(idx.conn, found)


def ms(seconds: list, p: float) -> str:
    return f"{1000 * sorted(seconds)[min(len(seconds) - 1, int(p * len(seconds)))]:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=None, help=f"a folder (e.g. {CORPUS})")
    parser.add_argument("--queries", type=int, default=200, help="of each kind, at most")
    parser.add_argument("--seed", default="cjk")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        folder = os.path.join(work, "notes")
        corpus_copy(args.corpus or FIXTURE, None, folder)
        after = os.path.join(work, "after.db")
        with HybridIndex(after, embedder=StandIn()) as index:
            index.index_folder(folder)
        before = os.path.join(work, "before.db")
        shutil.copyfile(after, before)
        conn = connect(before)
        with conn:
            conn.execute(SCHEMA5)
        conn.close()
        with HybridIndex(after, readonly=True) as new, HybridIndex(before, readonly=True) as old:
            chunks = [
                (i, text)
                for i, text in new.conn.execute("select id, text from chunks order by id")
                if RUN.search(text)
            ]
            cjk = {i for i, _ in chunks}
            total = new.conn.execute("select count(*) from chunks").fetchone()[0]
            others = [
                row
                for row in new.conn.execute("select id, text from chunks order by id")
                if row[0] not in cjk
            ]
            print(f"{len(chunks)} of {total} chunks have CJK text", file=sys.stderr)
            head = "| kind of query | queries | overlap@10 | same top-10 | hits@10 before/after"
            print(head + " | MRR@10 before/after | ms p50 before/after | ms p95 before/after |")
            print("| --- " * 8 + "|")
            for kind, pairs in queries(
                chunks, others, random.Random(args.seed), args.queries
            ).items():
                overlap = same = 0
                hits = [0, 0]
                rr = [0.0, 0.0]
                seconds: list = [[], []]
                for query, known in pairs:
                    lists = []
                    for i, (idx, was) in enumerate(((old, True), (new, False))):
                        found, took = search(idx, query, was)
                        lists.append(found)
                        seconds[i].append(took)
                        if known in found:
                            hits[i] += 1
                            rr[i] += 1 / (found.index(known) + 1)
                    both = len(set(lists[0]) & set(lists[1]))
                    overlap += both / max(len(lists[0]), len(lists[1]), 1)
                    same += lists[0] == lists[1]
                n = max(len(pairs), 1)
                print(
                    f"| {kind} | {len(pairs)} | {overlap / n:.3f} | {same} |"
                    f" {hits[0]}/{hits[1]} | {rr[0] / n:.3f}/{rr[1] / n:.3f} |"
                    f" {ms(seconds[0], 0.5)}/{ms(seconds[1], 0.5)} |"
                    f" {ms(seconds[0], 0.95)}/{ms(seconds[1], 0.95)} |"
                )


if __name__ == "__main__":
    main()
