"""How many distinct files the top 10 holds, with and without group_by_file.

    python bench/group_by_file.py examples/memory
    python bench/group_by_file.py /usr/share/doc/nodejs/contributing --db /tmp/node.db

Indexes FOLDER (incrementally, into --db, default bench/results/files.db) on the local model,
then runs each query (the defaults below, or --query, repeated) with decay off, and prints the
mean number of distinct files in the top 10 and the mean number of results.
"""

import argparse
import os
import statistics

from hybridsql.index import HybridIndex

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
        print("| query set | distinct files in the top 10 | results |\n| --- | --- | --- |")
        for grouped in (False, True):
            files, counts = [], []
            for q in args.query or QUERIES:
                found = idx.search(q, limit=10, decay=False, group_by_file=grouped)
                files.append(len({r.path for r in found}))
                counts.append(len(found))
            label = "group_by_file" if grouped else "by chunk (default)"
            print(f"| {label} | {statistics.mean(files):.1f} | {statistics.mean(counts):.1f} |")


if __name__ == "__main__":
    main()
