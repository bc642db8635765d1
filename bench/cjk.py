"""What a trigram table of the CJK chunks alone (schema 5) changes in keyword search, against one
of every chunk (schema 4): a known-item check on the same index.

    python bench/cjk.py                                   # tests/data/cjk
    python bench/cjk.py --corpus ../shared/data/markdown  # the real corpus's CJK chunks

The folder is indexed once (chunks cut as the local model's, stand-in vectors: keyword search
reads none); a copy is given schema 4's trigram tables, filled from every chunk, and searched as
schema 4's code searched (any CJK character sent a query to the trigram table, where now CJK
punctuation alone around English words does not).
Queries are drawn from the CJK chunks (seeded): a CJK substring of 3 to 8 characters; the same
with an English word of the chunk; a CJK run of 1 or 2 characters with one or two of its English
words (the queries whose results may change: their words were matched in every chunk); and,
from a chunk without CJK, one or two of its English words in CJK quotation marks 「」 (which
send a query to the trigram table too). Each
query's known item is its chunk. Printed for each kind of query: how many, the mean overlap of
the two top-10 lists, how many lists are the same, the known item's hits@10 and MRR@10 before
and after.
"""

import argparse
import os
import random
import re
import shutil
import sys
import tempfile

from file_size import CORPUS, StandIn, corpus_copy

from hybridsql.db.extension import connect
from hybridsql.db.schema import CJK
from hybridsql.indexing.index import HybridIndex
from hybridsql.search import keywords

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "tests", "data", "cjk")
RUN = re.compile(f"[{CJK}]+")
WORD = re.compile(r"\b[A-Za-z]{4,}\b")

# Schema 4's trigram tables (hybridsql/db/schema.py at schema 4), over every chunk. Nothing writes
# to the copy, so schema 5's triggers stay.
SCHEMA4 = """
drop table chunks_trigram; drop table memories_trigram;
create view document_chunks as select id, text from chunks where kind = 'document';
create virtual table chunks_trigram using fts5(
  text, content='document_chunks', content_rowid='id', tokenize='trigram'
);
create virtual table memories_trigram using fts5(
  text, content='memory_chunks', content_rowid='id', tokenize='trigram'
);
insert into chunks_trigram(chunks_trigram) values ('rebuild');
insert into memories_trigram(memories_trigram) values ('rebuild');
"""


def queries(chunks: list, others: list, rng: random.Random, each: int) -> dict:
    """Up to ``each`` (query, known chunk id) pairs of every kind, from CJK chunks, and from
    ``others`` (chunks without CJK) English words in CJK quotation marks."""
    kinds: dict = {"cjk 3-8": [], "cjk 3-8 + word": [], "cjk 1-2 + words": [], "「words」": []}
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
        runs = [r for r in RUN.findall(text) if len(r) >= 3 and not r.isspace()]
        words = list(dict.fromkeys(WORD.findall(text)))
        if not runs:
            continue
        run = rng.choice(runs)
        size = rng.randint(3, min(8, len(run)))
        start = rng.randrange(len(run) - size + 1)
        cjk = run[start : start + size]
        short = run[start : start + rng.randint(1, 2)]
        kinds["cjk 3-8"].append((cjk, cid))
        if words:
            kinds["cjk 3-8 + word"].append((f"{cjk} {rng.choice(words)}", cid))
            picked = rng.sample(words, min(len(words), rng.randint(1, 2)))
            kinds["cjk 1-2 + words"].append((" ".join([short, *picked]), cid))
    return {k: list(dict.fromkeys(v))[:each] for k, v in kinds.items()}


def top10(idx, query: str, before: bool) -> list:
    """The ids of the first 10 keyword results. ``before``: as schema 4's code planned them,
    where any CJK character, punctuation too, sent a query to the trigram table."""
    letter = keywords._LETTER
    if before:
        keywords._LETTER = re.compile(".", re.S)
    try:
        found = idx.search(query, mode="keyword", limit=10, decay=False, per_file=0)
    finally:
        keywords._LETTER = letter
    return [r.id for r in found]


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
            conn.execute(SCHEMA4)
        conn.close()
        with HybridIndex(after, readonly=True) as new, HybridIndex(before, readonly=True) as old:
            chunks = new.conn.execute(
                "select c.id, c.text from chunks c join chunks_trigram_docsize d on d.id = c.id"
            ).fetchall()
            total = new.conn.execute("select count(*) from chunks").fetchone()[0]
            others = new.conn.execute(
                "select id, text from chunks"
                " where id not in (select id from chunks_trigram_docsize) order by id"
            ).fetchall()
            print(f"{len(chunks)} of {total} chunks have CJK text", file=sys.stderr)
            head = "| kind of query | queries | overlap@10 | same top-10 | hits@10 before/after"
            print(head + " | MRR@10 before/after")
            print("| --- " * 6 + "|")
            for kind, pairs in queries(
                chunks, others, random.Random(args.seed), args.queries
            ).items():
                overlap = same = 0
                hits = [0, 0]
                rr = [0.0, 0.0]
                for query, known in pairs:
                    lists = [top10(old, query, True), top10(new, query, False)]
                    both = len(set(lists[0]) & set(lists[1]))
                    overlap += both / max(len(lists[0]), len(lists[1]), 1)
                    same += lists[0] == lists[1]
                    for i, found in enumerate(lists):
                        if known in found:
                            hits[i] += 1
                            rr[i] += 1 / (found.index(known) + 1)
                n = max(len(pairs), 1)
                print(
                    f"| {kind} | {len(pairs)} | {overlap / n:.3f} | {same} |"
                    f" {hits[0]}/{hits[1]} | {rr[0] / n:.3f}/{rr[1] / n:.3f} |"
                )


if __name__ == "__main__":
    main()
