"""How many distinct files the top 10 holds: chunks as results, the default, group_by_file.

    python bench/group_by_file.py examples/memory
    python bench/group_by_file.py /usr/share/doc/nodejs/contributing --db /tmp/node.db

Indexes FOLDER (incrementally, into --db, default bench/results/files.db) on the local model,
then runs each query (the defaults below, or --query, repeated) with decay off, and prints the
mean number of distinct files in the top 10, the mean number of results, and the most results of
one file in any query's top 10.
"""

import argparse
import os
import statistics
from collections import Counter

from hybridsql.indexing.index import HybridIndex

HERE = os.path.dirname(os.path.abspath(__file__))
QUERIES = [
    "how do users log in",
    "redis cache",
    "deploy",
    "incident postmortem",
    "database migration",
    "how do I run the tests",
    "how to backport a fix to a release line",
    "security release process",
    "writing a benchmark",
    "landing a pull request",
    "error codes",
    "style guide",
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--db", default=os.path.join(HERE, "results", "files.db"))
    parser.add_argument("--query", action="append", help="a query (repeat); default: a fixed set")
    args = parser.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(args.db)), exist_ok=True)
    with HybridIndex(args.db, embedder="local") as idx:
        report = idx.index_folder(args.folder)
        print(f"{args.folder}: {report.files_seen} files, {report.chunks_written} chunks written")
        print("| results | distinct files in the top 10 | results | most of one file |")
        print("| --- | --- | --- | --- |")
        ways = {
            "by chunk (per_file 0)": {"per_file": 0},
            "default (per_file 2)": {},
            "group_by_file": {"group_by_file": True},
        }
        for label, options in ways.items():
            files, counts, most = [], [], 0
            for q in args.query or QUERIES:
                found = idx.search(q, limit=10, decay=False, **options)
                files.append(len({r.path for r in found}))
                counts.append(len(found))
                most = max(most, *Counter(r.path for r in found).values())
            mean_files, mean_counts = statistics.mean(files), statistics.mean(counts)
            print(f"| {label} | {mean_files:.1f} | {mean_counts:.1f} | {most} |")


if __name__ == "__main__":
    main()
