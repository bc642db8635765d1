"""The exact query at the speed of k (issue 42, target 1; issue 34 before it): a condition that
SQLite does not hand to vector_index (an OR across columns, an expression), which SQLite tests
itself on the rows the table gives, written the two ways that give the N best of the rows it
selects:

    k = N and rowid in (select rowid from v where COND)   the k form: COND applied first
    COND order by score desc limit N                      the exact form: SQLite tests COND on
                                                          rows handed best first

with COND selecting 10 %, 25 % and 100 % of the rows (the target: the exact form within 1.5 x
the k form whenever COND keeps at least 10 %), and `k = N` with no condition beside them, in
apsw's SQLite and the stock sqlite3 shell's.

    python bench/knn_filters.py                    # 100,000 and 1,000,000 rows of 384 dims
    python bench/knn_filters.py 20000 128          # one size: N rows of D dims
    python bench/knn_filters.py --library OTHER/hybridsql.so   # another build (before/after)
    python bench/knn_filters.py --remove           # deletes the files it made, and stops

The files are made once (random vectors, metadata m = rowid % 10; 1M x 384 takes a few minutes
and 2 GB) and kept in $TMPDIR/hybridsql-knn-filters/ until --remove. Each statement runs 9 times
in one connection (apsw) or one shell: the median of the last 8 (warm; the first reads the file)
in milliseconds of wall time and of CPU time (user + system; the shell's own timer), which moves
less on a shared machine. The ratio is of CPU times.
"""

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import apsw
import numpy as np

import hybridsql

KEEP = os.path.join(tempfile.gettempdir(), "hybridsql-knn-filters")
RUNS = 9
# conditions SQLite keeps (never handed to a virtual table), and the share of rows each selects
CONDITIONS = {
    "10 %": "(m = 3 or rowid % 1000 = 7)",
    "25 %": "(m in (1, 2) or rowid % 20 = 0)",
    "100 %": "(m >= 0 or rowid % 2 = 0)",
}
LIMITS = (10, 100)
LIBRARY = hybridsql.loadable_path()


def build(n, d):
    """n random rows of d dimensions, m = rowid % 10, made once into KEEP."""
    os.makedirs(KEEP, exist_ok=True)
    path = os.path.join(KEEP, f"knn_filters_{n}_{d}.db")
    if os.path.exists(path):
        return path
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + ".part" + suffix):
            os.remove(path + ".part" + suffix)
    rng = np.random.default_rng(34)
    conn = apsw.Connection(path + ".part")
    hybridsql.load(conn)
    conn.execute(f"create virtual table v using vector_index(e float[{d}], m integer)")
    for base in range(0, n, 50_000):
        block = rng.standard_normal((min(50_000, n - base), d)).astype(np.float32)
        rows = [(base + i + 1, v.tobytes(), (base + i + 1) % 10) for i, v in enumerate(block)]
        with conn:
            conn.executemany("insert into v(rowid, e, m) values (?, ?, ?)", rows)
    conn.close()
    os.rename(path + ".part", path)
    return path


def apsw_times(path, sql):
    """Wall and CPU milliseconds of each run in one connection, and the rows of the last."""
    conn = apsw.Connection(path)
    conn.enable_load_extension(True)
    conn.load_extension(LIBRARY)
    wall, cpu, rows = [], [], None
    for _ in range(RUNS):
        start, start_cpu = time.perf_counter(), time.process_time()
        rows = conn.execute(sql).fetchall()
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    conn.close()
    return wall, cpu, rows


def shell_times(path, sql):
    script = f".load {LIBRARY}\n.timer on\n" + f"{sql};\n" * RUNS
    out = subprocess.run(
        ["sqlite3", path], input=script, capture_output=True, text=True, check=True
    ).stdout
    found = re.findall(r"Run Time: real ([0-9.]+) user ([0-9.]+) sys ([0-9.]+)", out)
    wall = [float(r) * 1000 for r, _, _ in found]
    return wall, [(float(u) + float(s)) * 1000 for _, u, s in found]


def warm(times):
    return statistics.median(times[1:])


def measure(n, d):
    path = build(n, d)
    q = np.random.default_rng(1).standard_normal(d).astype(np.float32)
    head = f"select rowid, score from v where e match '[{', '.join(map(str, q.tolist()))}]' "
    engines = {"apsw " + apsw.sqlite_lib_version(): apsw_times}
    if shutil.which("sqlite3"):
        version = subprocess.run(
            ["sqlite3", "--version"], capture_output=True, text=True, check=True
        )
        engines["shell " + version.stdout.split()[0]] = shell_times
    print(
        f"\n{n:,} x {d}: warm median ms, wall / CPU; ratio: the exact form's CPU time to the"
        " k form's"
    )
    print("| engine | N | COND keeps | k = N, no COND | k form | exact form | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for engine, timed in engines.items():
        for limit in LIMITS:
            plain = timed(path, head + f"and k = {limit}")
            for share, cond in CONDITIONS.items():
                k_form = head + f"and k = {limit} and rowid in (select rowid from v where {cond})"
                exact = head + f"and {cond} order by score desc limit {limit}"
                a, b = timed(path, k_form), timed(path, exact)
                if engine.startswith("apsw") and a[2] != b[2]:
                    raise SystemExit(f"the two forms differ: {k_form}\n{exact}")
                cells = [f"{warm(t[0]):.1f} / {warm(t[1]):.1f}" for t in (plain, a, b)]
                ratio = warm(b[1]) / max(warm(a[1]), 1e-3)
                print(f"| {engine} | {limit} | {share} | {' | '.join(cells)} | {ratio:.2f} |")


def main():
    global LIBRARY
    argv = sys.argv[1:]
    if "--remove" in argv:
        shutil.rmtree(KEEP, ignore_errors=True)
        return
    if "--library" in argv:
        at = argv.index("--library")
        LIBRARY = os.path.abspath(argv[at + 1])
        del argv[at : at + 2]
    print(f"library: {LIBRARY}")
    args = [int(a) for a in argv]
    sizes = (
        [(args[0], args[1] if len(args) > 1 else 384)]
        if args
        else [(100_000, 384), (1_000_000, 384)]
    )
    for n, d in sizes:
        measure(n, d)


if __name__ == "__main__":
    main()
