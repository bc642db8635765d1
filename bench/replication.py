"""Litestream replication and restore of a large index: seconds per GB.

Builds an index of synthetic documents (files, chunks of about 1 kB of words, their FTS5 rows
and 384-dimension random vectors in the vector_index table), as `hybridsql index` would write
them, until the file reaches the size asked for; then times, each in a fresh process:

- the first replication (`hybridsql replicate --once` to a file:// replica: Litestream's snapshot
  of the whole file);
- `litestream restore` alone (the replica's LTX files back into a database);
- `hybridsql restore` (the same, plus the checks before the file takes its name: SQLite's
  integrity check, which covers the vector_index tables, FTS5's, the schema).

Usage: python bench/replication.py [GB, default 1.0]  (needs the replicate extra)
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from hybridsql.db.replication import litestream_path
from hybridsql.indexing.index import HybridIndex

DIMS, CHUNKS_PER_FILE, BATCH = 384, 8, 2000
WORDS = np.array(
    "deploy billing postgres migration harbor gateway tide worker celery redis invoice stripe"
    " tracking container parcel dispatcher driver webhook carrier schema index vector keyword"
    " memory agent decision preference python tabs spaces review incident postmortem".split()
)


class RandomProvider:
    """Only names the model the vectors are filed under: the bench writes them itself."""

    model_id = "random-384"
    dims = DIMS

    def embed(self, texts):
        raise AssertionError("the bench writes its vectors itself")


def build(path: str, gigabytes: float) -> int:
    rng = np.random.default_rng(1)
    with HybridIndex(path, embedder=RandomProvider()) as idx:
        conn = idx.conn
        file_no = 0
        while os.path.getsize(path) < gigabytes * 1e9:
            conn.execute("begin")
            for _ in range(BATCH // CHUNKS_PER_FILE):
                file_no += 1
                rel = f"memory/f{file_no}.md"
                conn.execute(
                    "insert into files(root, path, sha256, size, mtime) values ('.', ?, ?, 0, 0)",
                    (rel, f"{file_no:064x}"),
                )
                file_id = conn.last_insert_rowid()
                for i in range(CHUNKS_PER_FILE):
                    text = " ".join(rng.choice(WORDS, 150)) + f" f{file_no}c{i}"
                    conn.execute(
                        "insert into chunks(kind, file_id, path, start_line, end_line, heading,"
                        " text, created_at) values ('document', ?, ?, ?, ?, '', ?, 0)",
                        (file_id, rel, i * 10 + 1, i * 10 + 10, text),
                    )
                    vector = rng.standard_normal(DIMS).astype("<f4").tobytes()
                    conn.execute(
                        "insert into vectors(chunk_id, vector, model_id, kind)"
                        " values (?, ?, 'random-384', 'document')",
                        (conn.last_insert_rowid(), vector),
                    )
            conn.execute("commit")
            conn.execute("pragma wal_checkpoint(truncate)")  # the size on disk is the file's
        return conn.execute("select count(*) from chunks").fetchone()[0]


def timed(command: list) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    gigabytes = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    work = tempfile.mkdtemp(prefix="hybridsql-replication-")
    db, replica = os.path.join(work, "big.db"), os.path.join(work, "replica")
    url = "file://" + replica
    start = time.perf_counter()
    chunks = build(db, gigabytes)
    size = os.path.getsize(db) / 1e9
    print(
        f"built {size:.2f} GB, {chunks} chunks with vectors, in {time.perf_counter() - start:.0f} s"
    )
    hybridsql = os.path.join(os.path.dirname(sys.executable), "hybridsql")
    figures = {
        "replicate (snapshot)": timed([hybridsql, "replicate", "--db", db, "--to", url, "--once"]),
        "litestream restore": timed(
            [litestream_path(), "restore", "-o", os.path.join(work, "raw.db"), url]
        ),
        "hybridsql restore (+ checks)": timed(
            [hybridsql, "restore", "--from", url, "--db", os.path.join(work, "checked.db")]
        ),
    }
    replica_bytes = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(replica) for f in fs
    )
    print(f"replica {replica_bytes / 1e9:.2f} GB")
    for name, seconds in figures.items():
        print(f"{name:30} {seconds:7.1f} s  {seconds / size:6.1f} s/GB")
    shutil.rmtree(work)  # about three times the index's size


if __name__ == "__main__":
    main()
