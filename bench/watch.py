"""Watch mode on the real corpus: save-to-searchable latency, idle CPU, a 500-file burst.

    python bench/watch.py                       # keyword-only, a 10,000-chunk index
    python bench/watch.py --embedder local --chunks 2000

Copies the corpus's files (../shared/data/markdown, sorted by path) into a temporary folder
until they make about --chunks chunks, indexes them with ``hybridsql index --watch`` in a
subprocess, then:
- saves --saves files one after another as editors do (the whole text written to a temporary
  file beside it, renamed over the file) with a new word appended, and times each from the
  rename until the index holds the word (polled every 5 ms): p50, p95, max;
- measures the watcher's CPU time (user + system, /proc) over --idle seconds with no change;
- writes 500 new files at once (copies of corpus files) and counts the batches that indexed
  them and the seconds until all were in the index.
"""

import argparse
import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import apsw

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "..", "shared", "data", "markdown")
# The corpus's bytes per chunk: 400-token chunks (keyword-only), the local model's 254
BYTES_PER_CHUNK = {"none": 905, "local": 583}


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def corpus_files(corpus: str) -> list:
    found = []
    for folder, dirs, files in os.walk(corpus):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".md")]
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=CORPUS)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--embedder", default="none")
    parser.add_argument("--saves", type=int, default=40)
    parser.add_argument("--idle", type=float, default=30.0)
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="hybridsql-watch-")
    folder, db = os.path.join(work, "notes"), os.path.join(work, "mem.db")
    files, size = corpus_files(args.corpus), 0
    if not files:
        raise SystemExit(f"no markdown in {args.corpus}: give --corpus")
    copied = []
    for path in files:
        if size >= args.chunks * BYTES_PER_CHUNK.get(args.embedder, 583):
            break
        rel = os.path.relpath(path, args.corpus)
        os.makedirs(os.path.dirname(os.path.join(folder, rel)), exist_ok=True)
        shutil.copyfile(path, os.path.join(folder, rel))
        copied.append(rel)
        size += os.path.getsize(path)
    hybridsql = os.path.join(os.path.dirname(sys.executable), "hybridsql")
    command = [hybridsql, "index", folder, "--db", db, "--embedder", args.embedder, "--watch"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    lines = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(json.loads(line)) for line in process.stdout] + [lines.put(None)],
        daemon=True,
    ).start()
    started = time.monotonic()
    first = lines.get(timeout=3600)
    if first is None:
        raise SystemExit(f"hybridsql index --watch exited {process.wait()}")
    conn = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(5000)
    chunks = conn.execute("select count(*) from chunks").fetchone()[0]
    print(
        f"index: {len(copied)} files, {size / 1e6:.1f} MB, {chunks} chunks, embedder"
        f" {args.embedder}, first run {time.monotonic() - started:.1f} s"
        f" ({first['files_indexed']} files)"
    )

    def holds(word: str) -> bool:
        return conn.execute(
            "select 1 from chunks where text like ? limit 1", (f"%{word}%",)
        ).fetchone()

    latencies = []
    for n in range(args.saves):
        rel = copied[(n * 7919) % len(copied)]
        path = os.path.join(folder, rel)
        word = f"zqxsaved{n}word"
        with open(path) as f:
            text = f.read()
        temp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
        with open(temp, "w") as f:
            f.write(text + f"\n\nSaved note {word}.\n")
        saved = time.monotonic()
        os.replace(temp, path)
        while not holds(word):
            if time.monotonic() - saved > 60:
                raise SystemExit(f"{word} not searchable within 60 s")
            time.sleep(0.005)
        latencies.append(time.monotonic() - saved)
        time.sleep(0.3)
    latencies.sort()
    p95 = latencies[max(0, round(0.95 * len(latencies)) - 1)]
    print(
        f"save to searchable ({args.saves} saves): p50 {statistics.median(latencies):.3f} s,"
        f" p95 {p95:.3f} s, max {latencies[-1]:.3f} s"
    )
    while not lines.empty():
        lines.get()

    time.sleep(2)
    before = cpu_seconds(process.pid)
    time.sleep(args.idle)
    idle = cpu_seconds(process.pid) - before
    print(f"idle: {idle:.3f} CPU-seconds in {args.idle:.0f} s ({100 * idle / args.idle:.2f} %)")

    burst = os.path.join(folder, "burst")
    os.mkdir(burst)
    written = time.monotonic()
    for i in range(500):
        shutil.copyfile(os.path.join(args.corpus, copied[i % len(copied)]), f"{burst}/{i:03}.md")
    count = "select count(*) from files where path like 'burst/%'"
    while conn.execute(count).fetchone()[0] < 500:
        time.sleep(0.01)
    took = time.monotonic() - written
    process.send_signal(signal.SIGINT)
    process.wait(600)
    reports = []
    while (report := lines.get(timeout=60)) is not None:
        reports.append(report)
    batches = [r for r in reports[:-1] if r["files_indexed"]]
    print(
        f"burst of 500 files: {len(batches)} batch(es) of {[b['files_indexed'] for b in batches]}"
        f" files, all in the index {took:.2f} s after the first was written"
    )
    print(f"stopped: exit {process.returncode}, {json.dumps(reports[-1])}")
    conn.close()
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
