"""Load on ``hybridsql mcp --http``: concurrent MCP clients over streamable HTTP on 127.0.0.1.

    python bench/mcp_load.py                      # 32 clients, 60 s, 80 % searches, local model
    python bench/mcp_load.py --embedder none --seconds 20
    python bench/mcp_load.py --clients 8 --search-share 1.0 --unique-queries  # no query repeats
    python bench/mcp_load.py --scaling            # p95 search latency: projects x memories
    python bench/mcp_load.py --clients 8 --search-share 1.0 --memories-only  # no documents
    python bench/mcp_load.py --in-process         # one warm process: hybrid, keyword, embedding
    python bench/mcp_load.py --in-process --profile  # and cProfile's top functions of hybrid

Each project's index holds examples/memory plus ``--memories`` memories (sentences of the
SciFact abstracts in tests/data/scifact), built once into bench/results/ and copied per run;
with ``--memories-only``, the memories alone, as a ``--data-dir`` server's indexes are.
Clients pick a random project for each request; a search asks for the first words of a random
SciFact query, an add writes a new sentence with a unique word. At the end, with the server
stopped, every add the server acknowledged must be in its project's index, found by a keyword
search for its word (lost writes). Prints one JSON line per run. The client runs in this
process and competes with the server for the same cores: report the core count with figures.
"""

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from hybridsql.indexing.index import HybridIndex
from hybridsql.memory import MemoryStore

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCIFACT = os.path.join(ROOT, "tests", "data", "scifact")
RESULTS = os.path.join(HERE, "results")
HYBRIDSQL = os.path.join(os.path.dirname(sys.executable), "hybridsql")


def read(name):
    with gzip.open(os.path.join(SCIFACT, f"{name}.jsonl.gz"), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def sentences():
    return [
        s for r in read("corpus") for s in re.split(r"(?<=\.)\s+", r["text"]) if 40 <= len(s) <= 400
    ]


def base_index(memories: int, embedder: str, documents: bool = True) -> str:
    """bench/results/mcp-load-EMBEDDER-N.db: examples/memory and N memories, built once;
    without ``documents``, mcp-load-EMBEDDER-N-memories.db, the memories alone (as the indexes
    of a ``--data-dir`` server are: it has no memory folder)."""
    name = f"mcp-load-{embedder}-{memories}{'' if documents else '-memories'}.db"
    path = os.path.join(RESULTS, name)
    if os.path.exists(path):
        return path
    os.makedirs(RESULTS, exist_ok=True)
    texts = sentences()
    texts = (texts * (memories // len(texts) + 1))[:memories]
    building = path + ".building"
    start = time.perf_counter()
    with HybridIndex(building, embedder=embedder) as index:
        if documents:
            index.index_folder(os.path.join(ROOT, "examples", "memory"))
        if index.embedder is not None:  # in batches: the adds then find them in the cache
            for i in range(0, len(texts), 64):
                index.embedder.embed(texts[i : i + 64])
        store = MemoryStore(index)
        for text in texts:
            store.add(text, "bench")
    os.replace(building, path)
    print(f"built {path} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return path


def read_text(path):
    with open(path) as f:
        return f.read()


def start_server(data_dir: str, embedder: str, log_path: str):
    log = open(log_path, "w")  # noqa: SIM115 - kept open for the server's lifetime
    proc = subprocess.Popen(
        [HYBRIDSQL, "mcp", "--http", "127.0.0.1:0", "--data-dir", data_dir, "--embedder", embedder],
        stdin=subprocess.DEVNULL,
        stderr=log,
        cwd=tempfile.gettempdir(),
    )
    for _ in range(1200):
        found = re.search(r"(http://127\.0\.0\.1:\d+)/mcp", read_text(log_path))
        if found:
            try:
                httpx2.get(found.group(1) + "/", timeout=5)
                return proc, found.group(1)
            except httpx2.TransportError:
                pass
        if proc.poll() is not None:
            raise SystemExit(read_text(log_path))
        time.sleep(0.1)
    raise SystemExit("the server did not start")


async def client(n, base, projects, queries, texts, args, stop_at, stats):
    rng = random.Random(n)
    async with contextlib.AsyncExitStack() as stack:
        # One MCP session at /mcp for every project: the tools' project argument picks the index.
        session = await open_session(stack, f"{base}/mcp")
        while time.monotonic() < stop_at:
            project = rng.choice(projects)
            if rng.random() < args.search_share:
                kind, tool = "search", "search_memory"
                words = rng.choice(queries).split()[:6]
                if args.unique_queries:  # a query no cache has seen: its embedding is paid
                    words.append(f"u{n}x{len(stats['search'])}")
                arguments = {"query": " ".join(words), "limit": 10, "documents": 3}
            else:
                kind, tool = "add", "add"
                word = f"loadw{n}x{len(stats['acked'])}r{rng.randrange(10**9)}"
                arguments = {"content": f"{rng.choice(texts)} ({word})"}
            arguments["project"] = project
            t = time.perf_counter()
            try:
                result = await session.call_tool(tool, arguments)
            except Exception as e:  # a transport failure is an error to report, not a crash
                stats["errors"].append(f"{kind}: {e!r}")
                continue
            stats[kind].append(time.perf_counter() - t)
            if result.is_error:
                stats["errors"].append(f"{kind}: {result.content[0].text}")
            elif kind == "search":
                stats["found"].append(len(json.loads(result.content[0].text)["memories"]))
            elif kind == "add":
                memory = json.loads(result.content[0].text)
                stats["acked"].append((project, memory["id"], word))


async def open_session(stack, url):
    """An initialized MCP client session, closed with ``stack``."""
    read, write = await stack.enter_async_context(streamable_http_client(url))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session


def percentile(values, p):
    if not values:
        return None
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))], 1)


def lost_writes(data_dir, acked):
    lost = 0
    by_project = {}
    for project, memory_id, word in acked:
        by_project.setdefault(project, []).append((memory_id, word))
    for project, added in by_project.items():
        path = os.path.join(data_dir, f"{project}.db")
        with HybridIndex(path, embedder="none", readonly=True) as index:
            store = MemoryStore(index)
            for memory_id, word in added:
                found = store.search(word, project=project, mode="keyword", reinforce=False)
                lost += memory_id not in [hit.memory.id for hit in found]
    return lost


def run(args, projects_count, memories):
    base_db = base_index(memories, args.embedder, not args.memories_only)
    data_dir = tempfile.mkdtemp(prefix="hybridsql-load-")
    projects = [f"p{i}" for i in range(projects_count)]
    for project in projects:
        path = os.path.join(data_dir, f"{project}.db")
        shutil.copy(base_db, path)
        # The server searches a project's own memories: the base index's are the bench's.
        with HybridIndex(path, embedder="none") as index, index.conn:
            index.conn.execute("update memories set project = ?", (project,))
    queries = [q["text"] for q in read("queries")]
    texts = sentences()
    proc, base = start_server(data_dir, args.embedder, os.path.join(data_dir, "server.log"))
    stats = {"search": [], "add": [], "errors": [], "acked": [], "found": []}
    try:
        stop_at = time.monotonic() + args.seconds

        async def main():
            await asyncio.gather(
                *(
                    client(n, base, projects, queries, texts, args, stop_at, stats)
                    for n in range(args.clients)
                )
            )

        start, client_start = time.perf_counter(), time.process_time()
        asyncio.run(main())
        elapsed = time.perf_counter() - start
        client_cpu = time.process_time() - client_start
        with open(f"/proc/{proc.pid}/status") as f:
            peak = next(line for line in f if line.startswith("VmHWM:"))
        with open(f"/proc/{proc.pid}/stat") as f:  # utime and stime, in clock ticks
            fields = f.read().rsplit(")", 1)[1].split()
        server_cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    served = len(stats["search"]) + len(stats["add"])
    report = {
        "clients": args.clients,
        "seconds": round(elapsed, 1),
        "projects": projects_count,
        "memories_per_project": memories,
        "embedder": args.embedder,
        "search_share": args.search_share,
        "unique_queries": args.unique_queries,
        "served": served,
        "per_second": round(served / elapsed, 1),
        # memories a search answered, on average (of at most its limit, 10)
        "memories_found": round(sum(stats["found"]) / max(len(stats["found"]), 1), 1),
        "errors": len(stats["errors"]),
        "first_errors": stats["errors"][:3],
        "lost_writes": lost_writes(data_dir, stats["acked"]),
        "adds_acknowledged": len(stats["acked"]),
        "cores": os.cpu_count(),
        "server_peak_rss_mb": int(peak.split()[1]) // 1024,
        # the server's CPU time (start included) a request: steadier than the rate on a
        # machine others load
        "server_cpu_ms_per_request": round(server_cpu * 1000 / max(served, 1), 1),
        # the clients' (this process's) CPU time a request, on the same cores
        "client_cpu_ms_per_request": round(client_cpu * 1000 / max(served, 1), 1),
    }
    for kind in ("search", "add"):
        report[kind] = {
            "n": len(stats[kind]),
            **{f"p{p}_ms": percentile(stats[kind], p) for p in (50, 95, 99)},
        }
    print(json.dumps(report), flush=True)
    shutil.rmtree(data_dir)
    return report


def in_process(args) -> None:
    """A search's cost in one warm process, no server: ``--queries`` distinct SciFact queries
    (each new to the process, as a server's are), hybrid, keyword, and the query's embedding
    alone, on a copy of the index. The target (issue 42): hybrid within 1.5 x embedding +
    keyword. ``--profile``: cProfile's top functions over the hybrid loop."""
    import cProfile
    import pstats
    import statistics

    base_db = base_index(args.memories, args.embedder)
    queries = [" ".join(q["text"].split()[:6]) for q in read("queries")]
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "mem.db")
        shutil.copy(base_db, db)
        with HybridIndex(db, embedder=args.embedder) as index:
            store = MemoryStore(index)
            store.search("warm up", reinforce=False)
            embedder = index.embedder
            rounds = {"hybrid": [], "keyword": [], "embedding": []}
            n = args.queries
            for r in range(3):  # each round its own queries: none is ever seen twice
                batch = queries[r * n : (r + 1) * n]
                for kind in rounds:
                    for i, words in enumerate(batch):
                        query = f"{words} {kind}{i}"  # an embedding the cache never saw
                        start = time.perf_counter()
                        if kind == "embedding":
                            embedder.embed([query])
                        else:
                            store.search(query, mode=kind, limit=10, reinforce=False)
                        rounds[kind].append(time.perf_counter() - start)
            median = {k: statistics.median(v) * 1000 for k, v in rounds.items()}
            target = median["hybrid"] / (median["embedding"] + median["keyword"])
            print(
                json.dumps(
                    {
                        "memories": args.memories,
                        "queries": 3 * n,
                        **{f"{k}_ms": round(v, 2) for k, v in median.items()},
                        "hybrid / (embedding + keyword)": round(target, 2),
                    }
                ),
                flush=True,
            )
            if args.profile:
                profile = cProfile.Profile()
                profile.enable()
                for i, query in enumerate(queries[3 * n : 4 * n]):
                    store.search(f"{query} profiled{i}", limit=10, reinforce=False)
                profile.disable()
                pstats.Stats(profile).sort_stats("cumulative").print_stats(40)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--search-share", type=float, default=0.8)
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument(
        "--unique-queries",
        action="store_true",
        help="a word of its own in each search's query: none repeats (SciFact has 187 distinct"
        " first 6 words), so no query vector comes from a cache",
    )
    parser.add_argument("--projects", type=int, default=1)
    parser.add_argument(
        "--memories-only",
        action="store_true",
        help="each project's index holds its memories alone, no document (a --data-dir"
        " server's indexes have no memory folder); search_memory still asks for 3 documents",
    )
    parser.add_argument("--embedder", default="local", choices=("local", "none"))
    parser.add_argument(
        "--scaling",
        action="store_true",
        help="searches only, --seconds each, for 1, 10, 100 projects x 1,000 and 10,000 memories",
    )
    parser.add_argument(
        "--in-process", action="store_true", help="one warm process's searches, no server"
    )
    parser.add_argument("--queries", type=int, default=50, help="with --in-process, per round")
    parser.add_argument("--profile", action="store_true", help="with --in-process: cProfile")
    args = parser.parse_args()
    if args.in_process:
        in_process(args)
        return
    if not args.scaling:
        run(args, args.projects, args.memories)
        return
    args.search_share = 1.0
    for memories in (1000, 10000):
        for projects in (1, 10, 100):
            run(args, projects, memories)


if __name__ == "__main__":
    main()
