"""Vector top-k: hybridsql's vector_index against sqlite-vec, numpy and faiss, in one run.

Each size gets one file with the same random float32 vectors four ways: a plain table (for
cosine_topk and as the plain insert rate), a vector_index table (partition key `project`, metadata
`tag`, ten values each), a sqlite-vec vec0 table (`project` and `tag` metadata columns) and, for
the disk figures, a file with the vector_index table alone. What a user sees is measured, not only
the warm loop: the first query of a fresh connection and of a new process, the first query after
another connection wrote a row, one-row and bulk inserts, and the bytes on disk before and after
deleting half the rows. Every time is a median; the systems are timed query by query in turn.
"""

import gc
import json
import os
import statistics
import subprocess
import sys
import time

import apsw
import numpy as np
from common import MMAP, RESULTS, connect, remove_db

import hybridsql
from hybridsql.db.vectors import VectorReader

K, QUERIES = 10, 20
FRESH = 5  # fresh connections, new processes: each measured this many times


def random_vectors(n, d, seed=1, block=50_000):
    """The benchmark's vectors, made block by block so 1M x 768 never needs two copies."""
    rng = np.random.default_rng(seed + d)
    for start in range(0, n, block):
        yield start, rng.standard_normal((min(block, n - start), d)).astype(np.float32)


def build(n, d, log):
    """The file of one size, and the insert rates measured while it was made."""
    path = os.path.join(RESULTS, f"vectors_{n}_{d}.db")
    meta = path + ".json"
    if os.path.exists(path) and os.path.exists(meta):
        with open(meta) as f:
            return path, json.load(f)
    tmp = path + ".part"
    remove_db(tmp)
    conn = connect(tmp)
    conn.execute(
        "create table items(id integer primary key, project integer, tag integer, vector blob);"
        f"create virtual table v using vector_index(e float[{d}], project integer partition key,"
        " tag integer);"
        f"create virtual table s using vec0(project integer, tag integer, embedding float[{d}]"
        " distance_metric=cosine)"
    )
    seconds = {"plain table": 0.0, "vector_index": 0.0, "sqlite-vec vec0": 0.0}
    for start, block in random_vectors(n, d):
        rows = [
            (start + i + 1, (start + i) % 10, (start + i) // 10 % 10, v.tobytes())
            for i, v in enumerate(block)
        ]
        for name, sql in (
            ("plain table", "insert into items values (?, ?, ?, ?)"),
            ("vector_index", "insert into v(rowid, project, tag, e) values (?, ?, ?, ?)"),
            (
                "sqlite-vec vec0",
                "insert into s(rowid, project, tag, embedding) values (?, ?, ?, ?)",
            ),
        ):
            began = time.perf_counter()
            with conn:
                conn.executemany(sql, rows)
            seconds[name] += time.perf_counter() - began
    conn.execute("create index items_project on items(project)")
    conn.execute("create index items_tag on items(tag)")
    conn.execute("pragma wal_checkpoint(truncate)")
    conn.close()
    os.rename(tmp, path)
    rates = {name: n / s for name, s in seconds.items()}
    log("  built " + ", ".join(f"{name} {r:,.0f} rows/s" for name, r in rates.items()))
    with open(meta, "w") as f:
        json.dump(rates, f)
    return path, rates


def exact_topk(matrix64, norms, q, k, rows=None):
    q64 = q.astype(np.float64)
    scores = (matrix64 @ q64) / np.where(norms > 0, norms, 1) / np.linalg.norm(q64)
    if rows is not None:
        keep = np.full(len(scores), -np.inf)
        keep[rows] = scores[rows]
        scores = keep
    order = np.lexsort((np.arange(len(scores)), -scores))[:k]
    return [int(i) + 1 for i in order]  # rowids start at 1


def interleaved(systems, runs=QUERIES, warm=2):
    """Median ms of each system, timed query by query in turn so that they all see the same
    load: on a shared machine the load moves, and ratios between systems must not."""
    times = {name: [] for name in systems}
    for i in range(warm + runs):
        for name, fn in systems.items():
            start = time.perf_counter()
            fn(i % runs)
            if i >= warm:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) * 1000 for name, ts in times.items()}


KNN = "select rowid from v where e match ? and k = 10"
SQL = {
    "vector_index": KNN,
    "vector_index, partition 10%": KNN + " and project = 3",
    "vector_index, metadata 10%": KNN + " and tag = 3",
    "sqlite-vec vec0": "select rowid from s where embedding match ? and k = 10",
    "sqlite-vec vec0, metadata 10%": "select rowid from s where embedding match ? and k = 10"
    " and project = 3",
    "cosine_topk aggregate": "select cosine_topk(?, 10, id, vector) from items",
    "cosine_topk aggregate, 10%": "select cosine_topk(?, 10, id, vector) from items"
    " where project = 3",
}

# A new process: imports, opens, then times its first k-nearest query alone.
NEW_PROCESS = r"""
import sys, time, hybridsql
conn = hybridsql.connect(sys.argv[1])
conn.execute("pragma mmap_size = " + sys.argv[2])
q = bytes.fromhex(sys.argv[3])
start = time.perf_counter()
conn.execute("select rowid from v where e match ? and k = 10", (q,)).fetchall()
print((time.perf_counter() - start) * 1000)
"""


def ids_of(conn, sql, blob):
    rows = conn.execute(sql, (blob,)).fetchall()
    if "cosine_topk" in sql:
        return [hit[0] for hit in json.loads(rows[0][0])]
    return [r[0] for r in rows]


def first_queries(path, mmap, blobs):
    """The first and second query of fresh connections, and the first of new processes."""
    first, second = [], []
    for i in range(FRESH):
        conn = connect(path, mmap)
        for out, blob in ((first, blobs[i]), (second, blobs[i + 1])):
            start = time.perf_counter()
            conn.execute(KNN, (blob,)).fetchall()
            out.append((time.perf_counter() - start) * 1000)
        conn.close()
    process = []
    for i in range(FRESH):
        out = subprocess.run(
            [sys.executable, "-c", NEW_PROCESS, path, str(MMAP if mmap else 0), blobs[i].hex()],
            capture_output=True,
            text=True,
            check=True,
            cwd=RESULTS,
        ).stdout
        process.append(float(out))
    return {
        "first query, fresh connection": statistics.median(first),
        "second query, fresh connection (fills the cache)": statistics.median(second),
        "first query, new process": statistics.median(process),
    }


def after_writes(path, mmap, blobs, n):
    """The query right after another connection wrote one row, against the query before."""
    reader, writer = connect(path, mmap), connect(path, mmap)
    for blob in blobs[:3]:
        reader.execute(KNN, (blob,)).fetchall()
    before, after = [], []
    for i, blob in enumerate(blobs):
        start = time.perf_counter()
        reader.execute(KNN, (blob,)).fetchall()
        before.append((time.perf_counter() - start) * 1000)
        writer.execute(
            "insert into v(rowid, project, tag, e) values (?, ?, ?, ?)",
            (n + 1 + i, i % 10, 0, blob),
        )
        start = time.perf_counter()
        reader.execute(KNN, (blob,)).fetchall()
        after.append((time.perf_counter() - start) * 1000)
    one_row = []
    for i, blob in enumerate(blobs):  # one-row inserts, each its own transaction
        start = time.perf_counter()
        writer.execute(
            "insert into v(rowid, project, tag, e) values (?, ?, ?, ?)",
            (n + 1001 + i, i % 10, 0, blob),
        )
        one_row.append((time.perf_counter() - start) * 1000)
    writer.execute(f"delete from v where rowid > {n}")
    reader.close()
    writer.close()
    return {
        "warm query (interleaved with the writes)": statistics.median(before),
        "first query after another connection wrote a row": statistics.median(after),
        "one-row insert": statistics.median(one_row),
    }


def disk(path, n, d, log):
    """Bytes of the vector_index table (its shadow tables), and after deleting every other
    row and VACUUM, in a file of its own."""
    own = os.path.join(RESULTS, f"vectors_{n}_{d}_alone.db")
    remove_db(own)
    conn = connect(own)
    conn.execute(
        f"create virtual table v using vector_index(e float[{d}], project integer partition key,"
        " tag integer)"
    )
    conn.execute("attach ? as src", (path,))
    with conn:
        conn.execute(
            "insert into v(rowid, project, tag, e) select id, project, tag, vector from src.items"
        )
    conn.execute("detach src")
    conn.execute("vacuum")
    conn.execute("pragma wal_checkpoint(truncate)")
    before = os.path.getsize(own)
    with conn:
        conn.execute("delete from v where rowid % 2 = 0")
    conn.execute("vacuum")
    conn.execute("pragma wal_checkpoint(truncate)")
    after = os.path.getsize(own)
    conn.close()
    remove_db(own)
    raw = n * d * 4
    log(f"  disk: {before / raw:.3f} x the raw float32 bytes; half deleted: {after / before:.3f} x")
    return {"bytes / raw float32": before / raw, "after deleting half, / before": after / before}


def bench_vectors(n, d, log):
    path, rates = build(n, d, log)
    matrix = np.concatenate([b for _, b in random_vectors(n, d)])
    qs = np.random.default_rng(99).standard_normal((QUERIES + 1, d)).astype(np.float32)
    blobs = [q.tobytes() for q in qs]
    matrix64 = matrix.astype(np.float64)
    norms = np.linalg.norm(matrix64, axis=1)
    project = np.flatnonzero(np.arange(n) % 10 == 3)
    tag = np.flatnonzero(np.arange(n) // 10 % 10 == 3)
    truth = {
        None: [exact_topk(matrix64, norms, q, K) for q in qs[:QUERIES]],
        "project": [exact_topk(matrix64, norms, q, K, project) for q in qs[:QUERIES]],
        "tag": [exact_topk(matrix64, norms, q, K, tag) for q in qs[:QUERIES]],
    }
    matrix64 = None
    gc.collect()
    row = {"n": n, "d": d, "insert rows/s": rates, "modes": {}}
    for mmap in (False, True):
        mode = "mmap" if mmap else "default I/O"
        out = row["modes"][mode] = {}
        out.update(first_queries(path, mmap, blobs))
        conn = connect(path, mmap)
        systems = {}
        recall = {}
        for name, sql in SQL.items():
            systems[name] = lambda i, sql=sql, c=conn: c.execute(sql, (blobs[i],)).fetchall()
            which = (
                "tag"
                if "metadata" in name and "vec0" not in name
                else ("project" if "%" in name else None)
            )
            got = [ids_of(conn, sql, b) for b in blobs[:QUERIES]]
            want = truth[which]
            recall[name] = float(
                np.mean([len(set(g) & set(w)) / K for g, w in zip(got, want, strict=True)])
            )
        if not mmap and n <= 100_000:
            reader = VectorReader(conn, "v", math_="numpy")
            systems["numpy path (VectorReader)"] = lambda i, r=reader: r.topk(blobs[i], K)
        out["warm"] = interleaved(systems)
        out["recall"] = recall
        conn.close()
        out.update(after_writes(path, mmap, blobs, n))
        for name, ms in {
            **out["warm"],
            **{k: v for k, v in out.items() if isinstance(v, float)},
        }.items():
            log(f"  {n:>8} x {d} {mode:<11} {name:<52} {ms:9.2f} ms")
    if d == 384 and n <= 1_000_000:
        import faiss  # here: --against runs without it

        normed = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
        qn = qs / np.linalg.norm(qs, axis=1, keepdims=True)
        faiss.omp_set_num_threads(1)
        index = faiss.IndexFlatIP(d)
        index.add(normed)
        row["others"] = interleaved(
            {
                "numpy matmul + argpartition": lambda i: np.argpartition(-(normed @ qn[i]), K)[:K],
                "faiss IndexFlatIP, 1 thread": lambda i: index.search(qn[i : i + 1], K),
                "bandwidth floor (numpy sum)": lambda i: matrix.sum(),
            }
        )
        for name, ms in row["others"].items():
            log(f"  {n:>8} x {d} {name:<64} {ms:9.2f} ms")
        index = normed = None
    matrix = None
    gc.collect()
    row["disk"] = disk(path, n, d, log)
    return row


def open_build(path, library):
    """A connection to path with `library` (a build of hybridsql.so) loaded, set up as
    hybridsql.connect sets up its own: both builds are opened the same way."""
    conn = apsw.Connection(path)
    conn.enable_load_extension(True)
    conn.load_extension(library)
    conn.enable_load_extension(False)
    conn.set_busy_timeout(5000)
    conn.execute("pragma journal_mode = wal; pragma synchronous = normal")
    conn.execute("pragma foreign_keys = on; pragma mmap_size = 0")
    return conn


def against(other, n, d, log):
    """This build's vector_index against another build (`other`, its hybridsql.so) on the same
    vectors, each build on a file it made: the bulk insert rate, then the bench's queries timed
    in turn (warm: every block cached), and the first query of fresh connections. One run, so
    that both builds see the same load."""
    builds = {"this build": hybridsql.loadable_path(), "other build": other}
    paths, conns, seconds = {}, {}, dict.fromkeys(builds, 0.0)
    for name, library in builds.items():
        paths[name] = os.path.join(RESULTS, f"against_{name.split()[0]}_{n}_{d}.db")
        remove_db(paths[name])
        conns[name] = open_build(paths[name], library)
        conns[name].execute(
            f"create virtual table v using vector_index(e float[{d}], project integer partition"
            " key, tag integer)"
        )
    for start, block in random_vectors(n, d, block=10_000):  # the builds in turn
        rows = [
            (start + i + 1, (start + i) % 10, (start + i) // 10 % 10, v.tobytes())
            for i, v in enumerate(block)
        ]
        for name, conn in conns.items():
            began = time.perf_counter()
            with conn:
                conn.executemany("insert into v(rowid, project, tag, e) values (?, ?, ?, ?)", rows)
            seconds[name] += time.perf_counter() - began
    rates = {}
    for name, conn in conns.items():
        conn.execute("pragma wal_checkpoint(truncate)")
        conn.close()
        rates[name] = n / seconds[name]
        log(f"  {n:>8} x {d} {name:<11} bulk insert {rates[name]:12,.0f} rows/s")
    blobs = [
        q.tobytes()
        for q in np.random.default_rng(99).standard_normal((QUERIES + 1, d)).astype(np.float32)
    ]
    first = {name: [] for name in builds}
    for i in range(FRESH):
        for name, library in builds.items():
            conn = open_build(paths[name], library)
            start = time.perf_counter()
            conn.execute(KNN, (blobs[i],)).fetchall()
            first[name].append((time.perf_counter() - start) * 1000)
            conn.close()
    conns = {name: open_build(paths[name], library) for name, library in builds.items()}
    systems = {
        f"{name}, {label}": lambda i, c=conns[name], sql=sql: c.execute(sql, (blobs[i],)).fetchall()
        for label, sql in SQL.items()
        if label.startswith("vector_index")
        for name in builds
    }
    warm = interleaved(systems)
    for name, conn in conns.items():
        got = [r for (r,) in conn.execute(KNN, (blobs[0],))]
        log(f"  {name}: first query's rows {got}")
        conn.close()
    for name in builds:
        ms = statistics.median(first[name])
        log(f"  {n:>8} x {d} {name:<11} first query, fresh connection {ms:9.2f} ms")
    for label, ms in warm.items():
        log(f"  {n:>8} x {d} warm {label:<52} {ms:9.3f} ms")
    for name in builds:
        remove_db(paths[name])
    return {"insert rows/s": rates, "first": first, "warm": warm}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=against.__doc__)
    parser.add_argument("--against", required=True, help="another build's hybridsql.so")
    parser.add_argument("-n", type=int, default=100_000)
    parser.add_argument("-d", type=int, default=384)
    args = parser.parse_args()
    os.makedirs(RESULTS, exist_ok=True)
    against(args.against, args.n, args.d, print)
