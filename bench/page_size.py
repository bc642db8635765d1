"""What the database's page size does to vector_index: the first query of a fresh connection and
of a new process against the warm query, the first query after another connection wrote a row,
one-row and bulk inserts (against a plain table's), and the bytes on disk.

    python bench/page_size.py                     # 100,000 x 384 at 4, 16, 32 and 64 KiB pages
    python bench/page_size.py 1000000 4096,32768  # another size, other page sizes
    python bench/page_size.py --hybrid 100000     # hybridsql search (FTS5 too) at 4 and 32 KiB

A cold query reads every block of int8 records through SQLite, one page at a time (a pread per
page, or a page fault per 4 KiB with mmap), so larger pages mean fewer calls into the kernel.
The files are kept in bench/results/page_size_N_P.db and reused. Times are medians of 9 fresh
connections, 9 new processes and 20 warm queries, interleaved.
"""

import os
import statistics
import subprocess
import sys
import time

import numpy as np
from common import (
    RESULTS,
    abstract_vectors,
    build_hybrid_db,
    fresh_file,
    open_fixed,
    remove_db,
    scifact_queries,
)

import hybridsql
from hybridsql.embedding.embedder import LocalProvider

D, K = 384, 10
SQL = f"select rowid, score from v where e match ? and k = {K}"
CHILD = f"""
import sys, time, numpy as np, hybridsql
conn = hybridsql.connect(sys.argv[1], backend="extension")
conn.execute("pragma mmap_size = " + sys.argv[2])
q = np.random.default_rng(int(sys.argv[3])).standard_normal({D}).astype(np.float32)
t = time.perf_counter()
conn.execute({SQL!r}, (q.tobytes(),)).fetchall()
print(time.perf_counter() - t)
"""


def new_file(path, page_size):
    """A connection to a new file with this page size."""
    fresh_file(path, page_size)
    conn = hybridsql.connect(path, backend="extension")
    assert conn.execute("pragma page_size").fetchone()[0] == page_size
    return conn


def insert_rate(conn, sql, n):
    """Rows a second of n random rows inserted in blocks of 50,000, a transaction each."""
    rng = np.random.default_rng(2)
    seconds = 0.0
    for base in range(0, n, 50_000):
        block = rng.standard_normal((min(50_000, n - base), D)).astype(np.float32)
        rows = [(base + i + 1, (base + i) // 10 % 10, v.tobytes()) for i, v in enumerate(block)]
        start = time.perf_counter()
        with conn:
            conn.executemany(sql, rows)
        seconds += time.perf_counter() - start
    return n / seconds


def build(path, n, page_size):
    """A file of n random rows made with this page size; the bulk insert rates of vector_index
    and of a plain table (the same rows, in a file of their own), None if kept."""
    if os.path.exists(path):
        return None
    conn = new_file(path + ".part", page_size)
    conn.execute(
        f"create virtual table v using vector_index(e float[{D}], project integer partition key,"
        " tag integer)"
    )
    rate = insert_rate(conn, "insert into v(rowid, project, tag, e) values (?, 0, ?, ?)", n)
    conn.execute("pragma wal_checkpoint(truncate)")
    conn.close()
    os.rename(path + ".part", path)
    plain = new_file(path + ".plain", page_size)
    plain.execute("create table items(id integer primary key, tag integer, vector blob)")
    plain_rate = insert_rate(plain, "insert into items values (?, ?, ?)", n)
    plain.close()
    remove_db(path + ".plain")
    return rate, plain_rate


def measure(path, n, mmap):
    rng = np.random.default_rng(1)
    queries = rng.standard_normal((30, D)).astype(np.float32)
    first, process, warm, after, insert = [], [], [], [], []
    for i in range(9):
        conn = hybridsql.connect(path, backend="extension")
        conn.execute(f"pragma mmap_size = {mmap}")
        start = time.perf_counter()
        conn.execute(SQL, (queries[i].tobytes(),)).fetchall()
        first.append(time.perf_counter() - start)
        conn.close()
        out = subprocess.run(
            [sys.executable, "-c", CHILD, path, str(mmap), str(i)],
            capture_output=True,
            text=True,
            check=True,
        )
        process.append(float(out.stdout))
    reader = hybridsql.connect(path, backend="extension")
    writer = hybridsql.connect(path, backend="extension")
    for conn in (reader, writer):
        conn.execute(f"pragma mmap_size = {mmap}")
    for q in queries[:3]:
        reader.execute(SQL, (q.tobytes(),)).fetchall()
    for i in range(20):
        q = queries[i].tobytes()
        start = time.perf_counter()
        reader.execute(SQL, (q,)).fetchall()
        warm.append(time.perf_counter() - start)
        row = (n + 1 + i, rng.standard_normal(D).astype(np.float32).tobytes())
        start = time.perf_counter()
        writer.execute("insert into v(rowid, project, tag, e) values (?, 0, 1, ?)", row)
        insert.append(time.perf_counter() - start)
        start = time.perf_counter()
        reader.execute(SQL, (q,)).fetchall()
        after.append(time.perf_counter() - start)
    with writer:
        writer.execute("delete from v where rowid > ?", (n,))
    writer.execute("pragma wal_checkpoint(truncate)")
    return [statistics.median(x) * 1e3 for x in (warm, first, process, after, insert)]


def hybrid(n, pages):
    """HybridIndex.search over n chunks of SciFact text (bench/common.py's hybrid files, one
    per page size): warm hybrid and keyword-only medians over 50 claims, the files' searches
    interleaved, and the first search of a fresh connection (median of 9)."""
    queries = scifact_queries()
    qvecs = LocalProvider().embed(queries)
    vectors = abstract_vectors(lambda line: print(line, flush=True))
    paths = {page: build_hybrid_db(n, vectors, page) for page in pages}
    now = "2026-11-21"
    # A search compiles its query's highlighting pattern once per process (re's cache): each
    # query is searched once before it is timed, so that no file pays for the others.
    indexes = {page: open_fixed(paths[page], queries, qvecs) for page in pages}
    for q in queries:
        for idx in indexes.values():
            idx.search(q, now=now)
    first = {page: [] for page in pages}
    for i in range(9):
        for page in pages:
            idx = open_fixed(paths[page], queries, qvecs)
            start = time.perf_counter()
            idx.search(queries[i], now=now)
            first[page].append(time.perf_counter() - start)
            idx.close()
    modes = ("hybrid", "keyword")
    warm = {(page, mode): [] for page in pages for mode in modes}
    for q in queries[:3] + queries:
        for page, idx in indexes.items():
            for mode in modes:
                start = time.perf_counter()
                idx.search(q, now=now, mode=mode)
                warm[page, mode].append(time.perf_counter() - start)
    print(f"{n:,} chunks of SciFact text; median ms")
    print("| page | file MB | hybrid, warm | keyword only, warm | first hybrid, fresh connection |")
    print("| --- | --- | --- | --- | --- |")
    for page in pages:
        hybrid_ms, keyword_ms = (statistics.median(warm[page, m][3:]) * 1e3 for m in modes)
        print(
            f"| {page // 1024} KiB | {os.path.getsize(paths[page]) / 1e6:.0f} | {hybrid_ms:.1f}"
            f" | {keyword_ms:.1f} | {statistics.median(first[page]) * 1e3:.1f} |"
        )


def main():
    args = [a for a in sys.argv[1:] if a != "--hybrid"]
    n = int(args[0]) if args else 100_000
    sizes = [int(x) for x in args[1].split(",")] if len(args) > 1 else None
    os.makedirs(RESULTS, exist_ok=True)
    if "--hybrid" in sys.argv:
        hybrid(n, sizes or (4096, 32768))
        return
    print(f"{n:,} x {D}; ms (ratio to the warm query)")
    print(
        "| page | I/O | disk / raw float32 | bulk rows/s | warm | first, fresh connection"
        " | first, new process | after a write | one-row insert |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for page in sizes or (4096, 16384, 32768, 65536):
        path = os.path.join(RESULTS, f"page_size_{n}_{page}.db")
        rates = build(path, n, page)
        bulk = f"{rates[0]:,.0f} ({rates[0] / rates[1]:.2f} x plain)" if rates else "kept"
        disk = os.path.getsize(path) / (n * D * 4)
        for mmap, io in ((0, "default"), (1 << 36, "mmap")):
            warm, first, process, after, insert = measure(path, n, mmap)
            print(
                f"| {page // 1024} KiB | {io} | {disk:.3f} x | {bulk}"
                f" | {warm:.2f} | {first:.2f} ({first / warm:.2f} x) | {process:.2f}"
                f" ({process / warm:.2f} x) | {after:.2f} ({after / warm:.2f} x) | {insert:.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
