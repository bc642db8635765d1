"""Whether a document search's merged results show what matched: the share of keyword top-10
results (per_file=2, the default) whose text lacks their best chunk's (the chunk whose id and
score they carry), and the share whose text does not start with it.

    python bench/merged_text.py

The corpus is the SciFact abstracts of tests/data/scifact, each one line of a file of its own
(a long line is cut into pieces that share one line range), searched by its 200 claims, keyword
only (no embedding). It takes a few seconds.
"""

import gzip
import json
import os
import sys
import tempfile

from hybridsql.indexing.index import HybridIndex

SCIFACT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "scifact")


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        notes = os.path.join(folder, "notes")
        os.mkdir(notes)
        with gzip.open(os.path.join(SCIFACT, "corpus.jsonl.gz"), "rt") as corpus:
            for line in corpus:
                record = json.loads(line)
                with open(os.path.join(notes, f"{record['_id']}.md"), "w") as f:
                    f.write(record["text"] + "\n")
        with HybridIndex(os.path.join(folder, "index.db"), embedder="none") as index:
            index.index_folder(notes)
            text = dict(index.conn.execute("select id, text from chunks"))
            total = lacks = late = 0
            with gzip.open(os.path.join(SCIFACT, "queries.jsonl.gz"), "rt") as queries:
                for line in queries:
                    for r in index.search(json.loads(line)["text"], mode="keyword", limit=10):
                        total += 1
                        lacks += text[r.id] not in r.text
                        late += not r.text.startswith(text[r.id])
    print(
        f"{total} results: {lacks / total:.1%} lack their best chunk's text, "
        f"{late / total:.1%} do not start with it"
    )


if __name__ == "__main__":
    sys.exit(main())
