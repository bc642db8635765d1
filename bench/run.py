"""hybridsql against what users would pick instead, measured in one process and one run.

    pip install ".[bench]"
    python bench/run.py            # N in 10k, 100k, 1M x D in 384, 768 (about 40 minutes)
    python bench/run.py --quick    # N in 10k, 100k x D 384

Writes bench/results/report.md and bench/results/topk.png; docs/benchmarks.md explains them.
Every time is the median of 20 warm queries, the systems timed in turn query by query; every
system's top-10 is checked against an exact float64 top-10. The targets are ratios between
systems measured here, never wall-clock asserts.
"""

import argparse
import calendar
import gc
import json
import os
import platform
import re
import shutil
import statistics
import tempfile
import time

import apsw
import faiss
import numpy as np
import scifact
import sqlite_vec

import hybridsql
from hybridsql.embed import Embedder, LocalProvider
from hybridsql.index import HybridIndex, transaction
from hybridsql.schema import ensure_schema
from hybridsql.search import inverse_norms, numpy_topk

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
SCIFACT = scifact.DATA
K, QUERIES, MODEL = 10, 20, "bench"
MMAP = 1 << 36


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def connect(path, mmap):
    conn = hybridsql.connect(path, backend="extension")
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    conn.enable_load_extension(False)
    conn.execute(f"pragma mmap_size = {MMAP if mmap else 0}")
    return conn


# -- vector top-k ------------------------------------------------------------------------------


def vectors(n, d, seed=1, block=50_000):
    """The benchmark's vectors, made block by block so 1M x 768 never needs two copies."""
    rng = np.random.default_rng(seed + d)
    for start in range(0, n, block):
        yield start, rng.standard_normal((min(block, n - start), d)).astype(np.float32)


def build_topk_db(n, d):
    """One file with the same vectors three ways: hybridsql's `vectors`, a plain table with a
    project column (for cosine_topk and filters) and a sqlite-vec vec0 table."""
    path = os.path.join(RESULTS, f"topk_{n}_{d}.db")
    if os.path.exists(path):
        return path
    tmp = path + ".part"
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(tmp + suffix):
            os.remove(tmp + suffix)
    conn = connect(tmp, mmap=False)
    ensure_schema(conn)
    conn.execute(
        "create table items(id integer primary key, project integer, vector blob);"
        f"create virtual table vec_items using vec0(project integer, embedding float[{d}]"
        " distance_metric=cosine)"
    )
    conn.execute("drop trigger vectors_count_insert")  # one version bump at the end instead
    for start, block in vectors(n, d):
        rows = [(start + i, (start + i) % 10, v.tobytes()) for i, v in enumerate(block)]
        with conn:
            conn.executemany("insert into items values (?, ?, ?)", rows)
            conn.executemany(
                "insert into vectors values (?, 'bench', ?)", [(i, v) for i, _, v in rows]
            )
            conn.executemany(
                "insert into vec_items(rowid, project, embedding) values (?, ?, ?)", rows
            )
    with conn:
        conn.execute("create index items_project on items(project)")
        conn.execute("update meta set value = value + 1 where key = 'vectors_version'")
    conn.close()
    os.rename(tmp, path)
    return path


def exact_topk(matrix64, norms, q, k, rows=None):
    q64 = q.astype(np.float64)
    scores = (matrix64 @ q64) / np.where(norms > 0, norms, 1) / np.linalg.norm(q64)
    if rows is not None:
        keep = np.full(len(scores), -np.inf)
        keep[rows] = scores[rows]
        scores = keep
    order = np.lexsort((np.arange(len(scores)), -scores))[:k]
    return [int(i) for i in order]


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


def bench_topk(n, d, log):
    path = build_topk_db(n, d)
    matrix = np.concatenate([b for _, b in vectors(n, d)])
    ids = np.arange(n, dtype=np.int64)
    qs = np.random.default_rng(99).standard_normal((QUERIES, d)).astype(np.float32)
    blobs = [q.tobytes() for q in qs]
    project = np.arange(n) % 10 == 3
    prows = np.flatnonzero(project)
    matrix64 = matrix.astype(np.float64)
    norms = np.linalg.norm(matrix64, axis=1)
    truth = [exact_topk(matrix64, norms, q, K) for q in qs]
    truth_f = [exact_topk(matrix64, norms, q, K, prows) for q in qs]
    matrix64 = None
    gc.collect()

    sql_cases = [
        ("hybridsql vector_topk int8", "select id from vector_topk(?, 10, 'bench')", truth),
        (
            "hybridsql vector_topk float32",
            "select id from vector_topk(?, 10, 'bench', null, 'float32')",
            truth,
        ),
        (
            "hybridsql cosine_topk aggregate",
            "select cosine_topk(?, 10, id, vector) from items",
            truth,
        ),
        (
            "sqlite-vec vec0 KNN",
            "select rowid from vec_items where embedding match ? and k = 10",
            truth,
        ),
        (
            "filtered 10%: hybridsql vector_topk",
            "select id from vector_topk(?, 10, 'bench',"
            " (select json_group_array(id) from items where project = 3))",
            truth_f,
        ),
        (
            "filtered 10%: hybridsql cosine_topk",
            "select cosine_topk(?, 10, id, vector) from items where project = 3",
            truth_f,
        ),
        (
            "filtered 10%: sqlite-vec vec0 KNN",
            "select rowid from vec_items where embedding match ? and k = 10 and project = 3",
            truth_f,
        ),
    ]
    conns = {False: connect(path, mmap=False), True: connect(path, mmap=True)}
    systems, answers, wants = {}, {}, {}

    def sql_ids(conn, sql, blob):
        rows = conn.execute(sql, (blob,)).fetchall()
        if sql.startswith("select cosine_topk"):
            return [hit[0] for hit in json.loads(rows[0][0])]
        return [r[0] for r in rows]

    for mmap, conn in conns.items():
        for name, sql, want in sql_cases:
            label = name + (" (mmap)" if mmap else "")
            systems[label] = lambda i, c=conn, sql=sql: c.execute(sql, (blobs[i],)).fetchall()
            answers[label] = [sql_ids(conn, sql, b) for b in blobs]
            wants[label] = want

    inv = inverse_norms(matrix)  # what the search's cached VectorMatrix keeps
    normed = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    sub = normed[project]
    qn = qs / np.linalg.norm(qs, axis=1, keepdims=True)
    faiss.omp_set_num_threads(1)
    index = faiss.IndexFlatIP(d)
    index.add(normed)

    def np_topk(m, q, rows=None):
        s_ = m @ q
        top = np.argpartition(-s_, K)[:K]
        top = top[np.argsort(-s_[top])]
        return top if rows is None else rows[top]

    py = {
        "hybridsql numpy path": (
            lambda i: numpy_topk(matrix, ids, qs[i], K, inv),
            lambda r: [h[0] for h in r],
            truth,
        ),
        "numpy matmul + argpartition": (lambda i: np_topk(normed, qn[i]), list, truth),
        "filtered 10%: numpy": (lambda i: np_topk(sub, qn[i], prows), list, truth_f),
        "faiss IndexFlatIP, 1 thread": (
            lambda i: index.search(qn[i : i + 1], K),
            lambda r: r[1][0].tolist(),
            truth,
        ),
    }
    for name, (fn, to_ids, want) in py.items():
        systems[name] = fn
        answers[name] = [to_ids(fn(i)) for i in range(QUERIES)]
        wants[name] = want
    systems["bandwidth floor (numpy sum)"] = lambda i: matrix.sum()
    times = interleaved(systems)

    row = {"n": n, "d": d, "times": times, "recall": {}}
    for name, got in answers.items():
        want = wants[name]
        row["recall"][name] = float(
            np.mean([len(set(g) & set(w)) / K for g, w in zip(got, want, strict=True)])
        )
    for name, ms in times.items():
        rec = row["recall"].get(name)
        log(
            f"  {n:>8} x {d}  {name:<44} {ms:9.2f} ms"
            + ("" if rec is None else f"  recall {rec:.3f}")
        )
    for mmap, conn in conns.items():
        tag = " (mmap)" if mmap else ""
        start = time.perf_counter()
        conn.execute("update meta set value = value + 1 where key = 'vectors_version'")
        conn.execute("select * from vector_topk(?, 1, 'bench')", (blobs[0],)).fetchall()
        row["times"]["vector_topk packing after a write" + tag] = (
            time.perf_counter() - start
        ) * 1000
        conn.close()
    index = normed = sub = matrix = None
    gc.collect()
    return row


# -- hybrid end to end -------------------------------------------------------------------------


def scifact_texts():
    with open(os.path.join(SCIFACT, "corpus.jsonl")) as f:
        docs = [json.loads(line) for line in f]
    pieces = []
    for d in docs:
        sentences = re.split(r"(?<=\.)\s+", d["text"])
        for i in range(0, len(sentences), 2):
            pieces.append((d["_id"], d["title"] + "\n" + " ".join(sentences[i : i + 2])))
    return pieces


def build_hybrid_db(n, doc_vectors):
    """n chunks of SciFact text; each chunk's vector is its abstract's, with a little noise."""
    path = os.path.join(RESULTS, f"hybrid_{n}.db")
    if os.path.exists(path):
        return path
    pieces = scifact_texts()
    rng = np.random.default_rng(3)
    conn = connect(path + ".part", mmap=False)
    ensure_schema(conn)
    conn.execute(
        "create virtual table vec_chunks using vec0(embedding float[384] distance_metric=cosine)"
    )
    with transaction(conn):
        for i in range(n):
            doc, text = pieces[i % len(pieces)]
            day = 1 + i % 28
            path_name = f"memory/2026-10-{day:02d}.md" if i % 3 else f"notes/{doc}.md"
            conn.execute(
                "insert into chunks(id, kind, path, text, created_at)"
                " values (?, 'document', ?, ?, 0)",
                (
                    i + 1,
                    path_name,
                    text if i < len(pieces) else f"{text} (copy {i // len(pieces)})",
                ),
            )
            v = doc_vectors[doc] + rng.normal(0, 0.01, 384).astype(np.float32)
            conn.execute("insert into vectors values (?, ?, ?)", (i + 1, MODEL, v.tobytes()))
            conn.execute(
                "insert into vec_chunks(rowid, embedding) values (?, ?)", (i + 1, v.tobytes())
            )
    conn.close()
    os.rename(path + ".part", path)
    return path


def two_query_search(conn, query, qvec, now, pool=100, limit=10):
    """The usual approach: sqlite-vec KNN, FTS5 bm25, and the merge in Python."""
    from hybridsql.search import keyword_plan

    vec = conn.execute(
        "select rowid, distance from vec_chunks where embedding match ? and k = ?", (qvec, pool)
    ).fetchall()
    match = keyword_plan(query).match
    kw = (
        conn.execute(
            "select rowid, bm25(chunks_fts) from chunks_fts where chunks_fts match ?"
            " order by bm25(chunks_fts) limit ?",
            (match, pool),
        ).fetchall()
        if match
        else []
    )
    best = min((r for _, r in kw), default=-1.0)
    scores = {}
    for i, dist in vec:
        cos = 1 - dist
        scores[i] = [0.7 * max(0.0, (cos - 0.25) / 0.75), 0.0]
    for i, rank in kw:
        scores.setdefault(i, [0.0, 0.0])[1] = 0.3 * rank / best
    ranked = []
    marks = ",".join("?" * len(scores))
    rows = {
        r[0]: r
        for r in conn.execute(
            f"select id, path, text from chunks where id in ({marks})", list(scores)
        )
    }
    for i, (v, k) in scores.items():
        rel = v + k
        if rel < 0.1:
            continue
        m = re.search(r"(\d{4})-(\d{2})-(\d{2})\.md$", rows[i][1])
        decay = 1.0
        if m:
            age = (now - calendar.timegm(time.strptime(m.group(0)[:10], "%Y-%m-%d"))) / 86400
            decay = 0.5 ** (max(0.0, age) / 30)
        ranked.append((rel * decay, i))
    ranked.sort(key=lambda t: (-t[0], t[1]))
    return [i for _, i in ranked[:limit]]


def bench_hybrid(sizes, log):
    scifact_db = os.path.join(RESULTS, "scifact.db")
    if not os.path.exists(scifact_db):
        log("  building bench/results/scifact.db first (bench/scifact.py)")
        with HybridIndex(scifact_db, embedder="local") as idx:
            scifact.build(idx)
    src = apsw.Connection(scifact_db)
    doc_vectors = {
        path: np.frombuffer(blob, dtype="<f4")
        for path, blob in src.execute(
            "select c.path, v.vector from chunks c join vectors v on v.chunk_id = c.id"
        )
    }
    src.close()
    with open(os.path.join(SCIFACT, "queries.jsonl")) as f:
        queries = [json.loads(line)["text"] for line in f][:50]
    provider = LocalProvider()
    qvecs = provider.embed(queries)
    rows = []
    now = calendar.timegm((2026, 11, 21, 0, 0, 0, 0, 0, 0))
    for n in sizes:
        path = build_hybrid_db(n, doc_vectors)
        idx = HybridIndex(path, embedder="none")
        idx.embedder = Embedder(Fixed(queries, qvecs), idx.conn)
        idx.searcher.embedder = idx.embedder
        idx.conn.execute(f"pragma mmap_size = {MMAP}")
        conn = connect(path, mmap=True)
        ours, theirs, overlap, fewer = [], [], [], []
        for _ in range(2):  # warm-up
            idx.search(queries[0], now=now)
            two_query_search(conn, queries[0], qvecs[0].tobytes(), now)
        for q, v in zip(queries, qvecs, strict=True):
            start = time.perf_counter()
            a = [r.id for r in idx.search(q, now=now)]
            ours.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            b = two_query_search(conn, q, v.tobytes(), now)
            theirs.append((time.perf_counter() - start) * 1000)
            overlap.append(len(set(a) & set(b)) / max(1, len(b)))
            start = time.perf_counter()
            idx.search(q, now=now, keyword_terms=8)
            fewer.append((time.perf_counter() - start) * 1000)
        row = {
            "n": n,
            "hybridsql p50": statistics.median(ours),
            "hybridsql p95": percentile(ours, 95),
            "two-query p50": statistics.median(theirs),
            "two-query p95": percentile(theirs, 95),
            "top-10 overlap": statistics.mean(overlap),
            "hybridsql keyword_terms=8 p50": statistics.median(fewer),
        }
        log(
            f"  hybrid {n:>7}: hybridsql p50 {row['hybridsql p50']:.1f} ms p95 "
            f"{row['hybridsql p95']:.1f} ms; two-query p50 {row['two-query p50']:.1f} ms p95 "
            f"{row['two-query p95']:.1f} ms; overlap {row['top-10 overlap']:.2f}"
        )
        rows.append(row)
        idx.close()
        conn.close()
    return rows


class Fixed:
    """A provider that knows the benchmark's query vectors (made by the local model)."""

    model_id, dims = MODEL, 384

    def __init__(self, texts, vecs):
        self.table = dict(zip(texts, vecs, strict=True))

    def embed(self, texts):
        return np.stack([self.table[t] for t in texts])


# -- indexing ----------------------------------------------------------------------------------


def bench_indexing(log):
    with open(os.path.join(SCIFACT, "corpus.jsonl")) as f:
        docs = [json.loads(line) for line in f]
    out = {}
    for name, count, embedder in (
        ("without embeddings", 2000, "none"),
        ("local model", 60, "local"),
    ):
        folder = tempfile.mkdtemp()
        os.makedirs(os.path.join(folder, "memory"))
        for d in docs[:count]:
            with open(os.path.join(folder, "memory", f"{d['_id']}.md"), "w") as f:
                f.write(f"# {d['title']}\n\n{d['text']}\n")
        db = os.path.join(folder, "index.db")
        with HybridIndex(db, embedder=embedder) as idx:
            start = time.perf_counter()
            report = idx.index_folder(folder)
            seconds = time.perf_counter() - start
        out[name] = report.chunks_written / seconds
        log(
            f"  indexing {name}: {report.chunks_written} chunks in {seconds:.1f} s, "
            f"{out[name]:.1f} chunks/s"
        )
        shutil.rmtree(folder)
    return out


# -- report ------------------------------------------------------------------------------------


def hardware():
    with open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    with open("/proc/meminfo") as f:
        mem = next(int(ln.split()[1]) // 1024 // 1024 for ln in f if ln.startswith("MemTotal"))
    debug = hybridsql.connect(":memory:").execute("select hybridsql_debug()").fetchone()[0]
    return (
        f"{cpu or platform.processor()}, {os.cpu_count()} cores, {mem} GiB; Python "
        f"{platform.python_version()}, SQLite {apsw.sqlite_lib_version()} (apsw "
        f"{apsw.apsw_version()}), sqlite-vec {getattr(sqlite_vec, '__version__', '?')}, faiss "
        f"{faiss.__version__}, numpy {np.__version__}; {debug}"
    )


def ratio(a, b):
    return f"{a:.1f} / {b:.1f} ms = {a / b:.2f} x"


def targets(topk_rows, hybrid_rows):
    """The issue's targets, each with its figure and whether this run met it."""
    lines = ["| target | measured | |", "| --- | --- | --- |"]

    def row(label, measured, ok):
        lines.append(f"| {label} | {measured} | {'met' if ok else '**not met**'} |")

    cell = next((r for r in topk_rows if r["n"] == 100_000 and r["d"] == 384), None)
    for tag in (" (mmap)", "") if cell else ():
        t, setting = cell["times"], "mmap" if tag else "no mmap"
        vec0 = t["sqlite-vec vec0 KNN" + tag]
        agg = t["hybridsql cosine_topk aggregate" + tag]
        floor = t["bandwidth floor (numpy sum)"]
        # The fastest SQL path: vector_topk with its default int8 first pass (exact).
        i8 = t["hybridsql vector_topk int8" + tag]
        row(f"vector_topk <= 0.25 x vec0 KNN ({setting})", ratio(i8, vec0), i8 <= 0.25 * vec0)
        row(
            f"vector_topk <= 2.5 x bandwidth floor ({setting})",
            ratio(i8, floor),
            i8 <= 2.5 * floor,
        )
        row(f"cosine_topk aggregate <= 1.0 x vec0 KNN ({setting})", ratio(agg, vec0), agg <= vec0)
        for name, unfiltered in (("vector_topk", i8), ("cosine_topk", agg)):
            f10 = t[f"filtered 10%: hybridsql {name}" + tag]
            row(
                f"filtered 10% <= 0.5 x unfiltered, {name} ({setting})",
                ratio(f10, unfiltered),
                f10 <= 0.5 * unfiltered,
            )
        rec = cell["recall"]["hybridsql vector_topk int8" + tag]
        row(
            f"int8 >= 3 x faster than float32 cosine_topk, recall@10 >= 0.98 ({setting})",
            f"{agg / i8:.1f} x faster, recall {rec:.3f}",
            agg >= 3 * i8 and rec >= 0.98,
        )
    big = next((r for r in topk_rows if r["n"] == 1_000_000 and r["d"] == 384), None)
    if big:
        t = big["times"]
        agg = min(t["hybridsql cosine_topk aggregate"], t["hybridsql cosine_topk aggregate (mmap)"])
        i8 = min(t["hybridsql vector_topk int8"], t["hybridsql vector_topk int8 (mmap)"])
        row("1M x 384 vector_topk under 150 ms", f"{i8:.0f} ms", i8 < 150)
        row("1M x 384 cosine_topk aggregate under 150 ms", f"{agg:.0f} ms", agg < 150)
    h = next((r for r in hybrid_rows if r["n"] == 100_000), None)
    if h:
        ours, theirs = h["hybridsql p50"], h["two-query p50"]
        row("hybrid at 100k: p50 < 25 ms", f"{ours:.1f} ms", ours < 25)
        row(
            "hybrid at 100k: <= 0.5 x the two-query approach",
            ratio(ours, theirs),
            ours <= 0.5 * theirs,
        )
    return lines


def chart(topk_rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted((r for r in topk_rows if r["d"] == 384), key=lambda r: r["n"])
    if len(rows) < 2:
        return False
    names = [k for k in rows[0]["times"] if not k.startswith(("filtered", "vector_topk packing"))]
    fig, ax = plt.subplots(figsize=(9, 6))
    for name in names:
        ax.plot([r["n"] for r in rows], [r["times"][name] for r in rows], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("vectors (N), D = 384")
    ax.set_ylabel("median query time, ms (k = 10)")
    ax.set_title("Vector top-k, warm, one process")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def quality(log):
    idx = HybridIndex(os.path.join(RESULTS, "scifact.db"), embedder="local")
    scifact.build(idx)
    queries, qrels = scifact.load_jsonl("queries.jsonl"), scifact.load_qrels("test")
    out = {}
    for name, options in scifact.CONFIGS.items():
        out[name] = scifact.evaluate(idx, queries, qrels, **options)
        log(f"  SciFact test {name}: nDCG@10 {out[name]:.3f}")
    idx.close()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N 10k and 100k, D 384 only")
    args = parser.parse_args()
    scifact.require_data()  # before the top-k runs, not after them
    os.makedirs(RESULTS, exist_ok=True)

    def log(text):
        print(text, flush=True)

    sizes = [10_000, 100_000] + ([] if args.quick else [1_000_000])
    dims = [384] + ([] if args.quick else [768])
    run = f"python bench/run.py{' --quick' if args.quick else ''}"
    topk_rows, hybrid_rows, indexing, ndcg = [], [], {}, {}
    log("vector top-k")
    for d in dims:
        for n in sizes:
            topk_rows.append(bench_topk(n, d, log))
            write_report(run, topk_rows, hybrid_rows, indexing, ndcg)  # a late failure loses less
    log("hybrid end to end")
    hybrid_rows = bench_hybrid([10_000, 100_000], log)
    log("indexing")
    indexing = bench_indexing(log)
    log("quality")
    ndcg = quality(log)
    print("\n".join(write_report(run, topk_rows, hybrid_rows, indexing, ndcg)))


def write_report(run, topk_rows, hybrid_rows, indexing, ndcg):
    """Writes bench/results/report.md (and the chart) from what has been measured so far."""
    lines = []
    lines += [
        "# hybridsql benchmark",
        "",
        f"Hardware: {hardware()}",
        "",
        f"Run: `{run}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Times are medians of "
        f"{QUERIES} warm queries, k = {K}; recall is the share of an exact float64 top-10 "
        "each system found.",
        "",
        "## Targets",
        "",
        *targets(topk_rows, hybrid_rows),
        "",
    ]
    for r in topk_rows:
        lines += [
            f"## Vector top-k, N = {r['n']:,}, D = {r['d']}",
            "",
            "| system | ms | recall@10 |",
            "| --- | --- | --- |",
        ]
        for name, ms in r["times"].items():
            rec = r["recall"].get(name)
            lines.append(f"| {name} | {ms:.2f} | {'' if rec is None else f'{rec:.3f}'} |")
        lines.append("")
    lines += [
        "## Hybrid search end to end (SciFact text, 50 queries)",
        "",
        "| chunks | hybridsql p50 | p95 | keyword_terms=8 p50 | two-query p50 | p95 |"
        " top-10 overlap |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for h in hybrid_rows:
        lines.append(
            f"| {h['n']:,} | {h['hybridsql p50']:.1f} ms | {h['hybridsql p95']:.1f} ms | "
            f"{h['hybridsql keyword_terms=8 p50']:.1f} ms | "
            f"{h['two-query p50']:.1f} ms | {h['two-query p95']:.1f} ms | "
            f"{h['top-10 overlap']:.2f} |"
        )
    lines += [
        "",
        "## Indexing",
        "",
        "| | chunks/s |",
        "| --- | --- |",
        *[f"| {k} | {v:.1f} |" for k, v in indexing.items()],
        "",
        "## Quality: SciFact test split, nDCG@10",
        "",
        "| configuration | nDCG@10 |",
        "| --- | --- |",
        *[f"| {k} | {v:.3f} |" for k, v in ndcg.items()],
        "",
    ]
    if chart(topk_rows, os.path.join(RESULTS, "topk.png")):
        lines += ["![query time versus N](topk.png)", ""]
    with open(os.path.join(RESULTS, "report.md"), "w") as f:
        f.write("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
