"""hybridsql against what users would pick instead, measured in one process and one run.

    pip install ".[bench]"
    python bench/run.py            # N in 10k, 100k, 1M x D 384 (45 min the first time, 20 after)
    python bench/run.py --quick    # vectors: N in 10k, 100k

Writes bench/results/report.md; docs/benchmarks.md explains it. Vector top-k is measured in
bench/vectors.py; hybrid search, indexing and quality here. The targets are ratios between
systems measured in the same run, never wall-clock asserts.
"""

import argparse
import calendar
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import apsw
import faiss
import numpy as np
import scifact
import sqlite_vec
import vectors
from common import (
    RESULTS,
    abstract_vectors,
    build_hybrid_db,
    connect,
    open_fixed,
    percentile,
    scifact_queries,
    upgraded,
)

import hybridsql
from hybridsql.embedding.embedder import LocalProvider
from hybridsql.indexing.index import HybridIndex
from hybridsql.memory import MemoryStore

SCIFACT = scifact.DATA
K, QUERIES = 10, 20


# -- hybrid end to end -------------------------------------------------------------------------


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
    doc_vectors = abstract_vectors(log)
    queries = scifact_queries()
    provider = LocalProvider()
    qvecs = provider.embed(queries)
    rows = []
    now = calendar.timegm((2026, 11, 21, 0, 0, 0, 0, 0, 0))
    for n in sizes:
        path = build_hybrid_db(n, doc_vectors)
        idx = open_fixed(path, queries, qvecs)
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


def bench_memories(n, log):
    """At n chunks: a document search with and without 1,000 memories in the same file, and the
    agent loop (add one memory, then search the memories), the embedding time left out."""
    doc_vectors = abstract_vectors(log)
    queries = scifact_queries()
    qvecs = LocalProvider().embed(queries)
    docs = build_hybrid_db(n, doc_vectors)
    mixed = docs.replace(".db", "_memories.db")
    texts = [f"{q} (memory {i})" for i, q in enumerate(queries * 20)][:1000]
    rng = np.random.default_rng(5)
    vecs = [
        qvecs[i % len(queries)] + rng.normal(0, 0.02, 384).astype(np.float32)
        for i in range(len(texts))
    ]
    if os.path.exists(mixed):
        upgraded(mixed)
    else:
        shutil.copy(docs, mixed)
        with open_fixed(mixed, queries, qvecs, texts, vecs) as idx:
            store = MemoryStore(idx)
            for i, text in enumerate(texts):
                store.add(text, project=f"p{i % 10}", sector="semantic")
    now = calendar.timegm((2026, 11, 21, 0, 0, 0, 0, 0, 0))
    plain, both = open_fixed(docs, queries, qvecs), open_fixed(mixed, queries, qvecs, texts, vecs)
    for idx in (plain, both):  # every query once: both files as warm in the page cache
        for query in queries:
            idx.search(query, now=now)
    times = vectors.interleaved(
        {
            "documents only": lambda i: plain.search(queries[i], now=now),
            "documents and 1,000 memories": lambda i: both.search(queries[i], now=now),
        },
        runs=len(queries),
    )
    store = MemoryStore(both)
    loop = []
    for i, q in enumerate(queries):
        start = time.perf_counter()
        memory = store.add(texts[i], project="p1", sector="episodic")
        store.search(q, project="p1", limit=10)
        loop.append((time.perf_counter() - start) * 1000)
        store.delete(memory.id, hard=True)
    plain.close()
    both.close()
    row = {
        "n": n,
        **times,
        "agent loop p50": statistics.median(loop),
        "agent loop p95": percentile(loop, 95),
    }
    log(
        f"  memories {n:>7}: documents only {times['documents only']:.1f} ms, with memories "
        f"{times['documents and 1,000 memories']:.1f} ms; agent loop p50 "
        f"{row['agent loop p50']:.1f} ms"
    )
    return row


def bench_processes(log):
    """`hybridsql search` as a new process (the local model, a real query) on 1k and 100k
    chunks: the wall time of the whole command."""
    doc_vectors = abstract_vectors(log)
    query = scifact_queries()[0]
    out = {}
    for n in (1_000, 100_000):
        path = build_hybrid_db(n, doc_vectors)
        cmd = [
            os.path.join(os.path.dirname(sys.executable), "hybridsql"),
            "search",
            query,
            "--db",
            path,
            "--embedder",
            "local",
            "--json",
        ]
        subprocess.run(cmd, capture_output=True, check=True)  # the files in the page cache
        times = []
        for _ in range(5):
            start = time.perf_counter()
            subprocess.run(cmd, capture_output=True, check=True)
            times.append((time.perf_counter() - start) * 1000)
        out[n] = statistics.median(times)
        log(f"  hybridsql search, new process, {n:>7} chunks: {out[n]:.0f} ms")
    return out


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


def targets(vector_rows, hybrid_rows, memory_rows, processes):
    """The targets of the issues, each with its figure and whether this run met it."""
    lines = ["| target | measured | |", "| --- | --- | --- |"]

    def row(label, measured, ok):
        lines.append(f"| {label} | {measured} | {'met' if ok else '**not met**'} |")

    for r in vector_rows:
        if r["d"] != 384 or r["n"] not in (100_000, 1_000_000):
            continue
        size = f"{r['n']:,} x {r['d']}"
        for mode, m in r["modes"].items():
            w = m["warm"]
            warm, vec0 = w["vector_index"], w["sqlite-vec vec0"]
            for which in ("first query, fresh connection", "first query, new process"):
                first = m[which]
                row(
                    f"{size}, {mode}: {which} <= 0.25 x vec0",
                    ratio(first, vec0),
                    first <= 0.25 * vec0,
                )
                row(
                    f"{size}, {mode}: {which} <= 3 x the warm query",
                    ratio(first, warm),
                    first <= 3 * warm,
                )
            after, before = (
                m["first query after another connection wrote a row"],
                m["warm query (interleaved with the writes)"],
            )
            row(
                f"{size}, {mode}: first query after a write <= 1.5 x warm",
                ratio(after, before),
                after <= 1.5 * before,
            )
            row(f"{size}, {mode}: warm query <= 0.1 x vec0", ratio(warm, vec0), warm <= 0.1 * vec0)
            for kind in ("partition", "metadata"):
                f10 = w[f"vector_index, {kind} 10%"]
                row(
                    f"{size}, {mode}: a {kind} filter of 10% <= 0.5 x unfiltered",
                    ratio(f10, warm),
                    f10 <= 0.5 * warm,
                )
            rec = m["recall"]["vector_index"]
            row(f"{size}, {mode}: recall@10 of vector_index", f"{rec:.3f}", rec == 1.0)
        if r["n"] == 1_000_000:
            one = r["modes"]["default I/O"]["one-row insert"]
            row(f"{size}: one-row insert p50 < 2 ms", f"{one:.3f} ms", one < 2)
        rates = r["insert rows/s"]
        bulk = rates["vector_index"] / rates["plain table"]
        row(
            f"{size}: bulk insert >= 0.5 x a plain table's rate",
            f"{rates['vector_index']:,.0f} / {rates['plain table']:,.0f} rows/s = {bulk:.2f} x",
            bulk >= 0.5,
        )
        disk = r["disk"]
        row(
            f"{size}: disk <= 1.35 x the raw float32 bytes",
            f"{disk['bytes / raw float32']:.3f} x",
            disk["bytes / raw float32"] <= 1.35,
        )
        row(
            f"{size}: after deleting half and VACUUM <= 0.6 x the size before",
            f"{disk['after deleting half, / before']:.3f} x",
            disk["after deleting half, / before"] <= 0.6,
        )
    for m in memory_rows:
        docs, both = m["documents only"], m["documents and 1,000 memories"]
        row(
            f"{m['n']:,} chunks: document search with memories <= 1.2 x documents only",
            ratio(both, docs),
            both <= 1.2 * docs,
        )
        row(
            f"{m['n']:,} chunks: agent loop (add, then search) p50 < 25 ms",
            f"{m['agent loop p50']:.1f} ms",
            m["agent loop p50"] < 25,
        )
    if processes:
        big, small = processes[100_000], processes[1_000]
        row(
            "a fresh `hybridsql search` on 100k chunks <= 1.25 x on 1k",
            ratio(big, small),
            big <= 1.25 * small,
        )
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


def quality(log):
    idx = scifact.open_index()
    queries, qrels = scifact.load_jsonl("queries.jsonl"), scifact.load_qrels("test")
    out = {}
    for name, options in scifact.CONFIGS.items():
        out[name] = scifact.evaluate(idx, queries, qrels, **options)
        log(f"  SciFact test {name}: nDCG@10 {out[name]:.3f}")
    idx.close()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="vectors at N 10k and 100k only")
    args = parser.parse_args()
    scifact.require_data()  # before the top-k runs, not after them
    os.makedirs(RESULTS, exist_ok=True)

    def log(text):
        print(text, flush=True)

    sizes = [10_000, 100_000] + ([] if args.quick else [1_000_000])
    run = f"python bench/run.py{' --quick' if args.quick else ''}"
    done = {
        "vectors": [],
        "hybrid": [],
        "memories": [],
        "processes": {},
        "indexing": {},
        "ndcg": {},
    }
    log("vector top-k")
    for n in sizes:
        done["vectors"].append(vectors.bench_vectors(n, 384, log))
        write_report(run, done)  # a late failure loses less
    log("hybrid end to end")
    done["hybrid"] = bench_hybrid([10_000, 100_000], log)
    done["memories"] = [bench_memories(100_000, log)]
    done["processes"] = bench_processes(log)
    write_report(run, done)
    log("indexing")
    done["indexing"] = bench_indexing(log)
    log("quality")
    done["ndcg"] = quality(log)
    print("\n".join(write_report(run, done)))


def write_report(run, done):
    """Writes bench/results/report.md (and report.json) from what has been measured so far."""
    lines = [
        "# hybridsql benchmark",
        "",
        f"Hardware: {hardware()}",
        "",
        f"Run: `{run}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Times are "
        f"medians (warm queries: {QUERIES}, timed query by query in turn with the others), "
        f"k = {K}; recall is the share of an exact float64 top-10 each system found.",
        "",
        "## Targets",
        "",
        *targets(done["vectors"], done["hybrid"], done["memories"], done["processes"]),
        "",
    ]
    for r in done["vectors"]:
        lines += [f"## Vector top-k, N = {r['n']:,}, D = {r['d']}", ""]
        modes = list(r["modes"])
        lines += ["| | " + " | ".join(modes) + " |", "| --- |" + " --- |" * len(modes)]
        names = list(r["modes"][modes[0]]["warm"])
        for name in names:
            cells = []
            for mode in modes:
                ms = r["modes"][mode]["warm"].get(name)
                rec = r["modes"][mode]["recall"].get(name)
                cells.append(
                    ""
                    if ms is None
                    else f"{ms:.2f} ms" + ("" if rec is None else f" (recall {rec:.3f})")
                )
            lines.append(f"| warm: {name} | " + " | ".join(cells) + " |")
        for key, value in r["modes"][modes[0]].items():
            if isinstance(value, float):
                lines.append(
                    f"| {key} | " + " | ".join(f"{r['modes'][m][key]:.2f} ms" for m in modes) + " |"
                )
        for name, ms in r.get("others", {}).items():
            lines.append(f"| {name} | {ms:.2f} ms | |")
        for name, rate in r["insert rows/s"].items():
            lines.append(f"| bulk insert, {name} | {rate:,.0f} rows/s | |")
        for name, x in r["disk"].items():
            lines.append(f"| disk: {name} | {x:.3f} | |")
        lines.append("")
    lines += [
        "## Hybrid search end to end (SciFact text, 50 queries)",
        "",
        "| chunks | hybridsql p50 | p95 | keyword_terms=8 p50 | two-query p50 | p95 |"
        " top-10 overlap |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for h in done["hybrid"]:
        lines.append(
            f"| {h['n']:,} | {h['hybridsql p50']:.1f} ms | {h['hybridsql p95']:.1f} ms | "
            f"{h['hybridsql keyword_terms=8 p50']:.1f} ms | "
            f"{h['two-query p50']:.1f} ms | {h['two-query p95']:.1f} ms | "
            f"{h['top-10 overlap']:.2f} |"
        )
    lines += ["", "## Memories and processes", ""]
    for m in done["memories"]:
        lines += [f"- {m['n']:,} chunks: {k} {v:.1f} ms" for k, v in m.items() if k != "n"]
    for n, ms in done["processes"].items():
        lines.append(f"- `hybridsql search` as a new process on {n:,} chunks: {ms:.0f} ms")
    lines += [
        "",
        "## Indexing",
        "",
        "| | chunks/s |",
        "| --- | --- |",
        *[f"| {k} | {v:.1f} |" for k, v in done["indexing"].items()],
        "",
        "## Quality: SciFact test split, nDCG@10",
        "",
        "| configuration | nDCG@10 |",
        "| --- | --- |",
        *[f"| {k} | {v:.3f} |" for k, v in done["ndcg"].items()],
        "",
    ]
    with open(os.path.join(RESULTS, "report.md"), "w") as f:
        f.write("\n".join(lines))
    with open(os.path.join(RESULTS, "report.json"), "w") as f:
        json.dump(done, f, indent=1, default=str)
    return lines


if __name__ == "__main__":
    main()
