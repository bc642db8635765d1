"""What a filter that SQLite does not hand to vector_index costs (issue 34): the OR of a rowid
list and a metadata column applied after `k = 10` (fewer rows), inside `rowid in (select rowid
...)` and with `order by score desc limit 10` (both the 10 best of the rows it selects), in
apsw's SQLite and the stock sqlite3 shell's.

    python bench/knn_filters.py               # 20,000 random rows of 128 dimensions
    python bench/knn_filters.py 100000 384    # another size

The file is bench/results/knn_filters_N_D.db, made once and reused. Each statement runs 9 times
in one process: the first run, then the median of the rest, in milliseconds.
"""

import os
import re
import statistics
import subprocess
import sys
import time

import apsw
import numpy as np

import hybridsql

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
RUNS = 9
OR = "(rowid in (1, 4, 100, 2000) or m = 3)"
FORMS = {
    "k = 10, the OR after": f"and k = 10 and {OR}",
    "k = 10, the OR in rowid in (select ...)": (
        f"and k = 10 and rowid in (select rowid from v where {OR})"
    ),
    "the OR, order by score desc limit 10": f"and {OR} order by score desc limit 10",
    "k = 10, no OR": "and k = 10",
}


def build(path, n, d):
    rng = np.random.default_rng(34)
    conn = apsw.Connection(path)
    hybridsql.load(conn)
    conn.execute(f"create virtual table v using vector_index(e float[{d}], m integer)")
    with conn:
        for i in range(1, n + 1):
            v = rng.standard_normal(d).astype(np.float32)
            conn.execute("insert into v(rowid, e, m) values (?, ?, ?)", (i, v.tobytes(), i % 7))
    conn.close()


def apsw_times(path, sql):
    conn = apsw.Connection(path)
    hybridsql.load(conn)
    times, rows = [], None
    for _ in range(RUNS):
        start = time.perf_counter()
        rows = conn.execute(sql).fetchall()
        times.append((time.perf_counter() - start) * 1000)
    conn.close()
    return times, len(rows)


def shell_times(path, sql):
    script = f".load {hybridsql.loadable_path()}\n.timer on\n" + f"{sql};\n" * RUNS
    out = subprocess.run(
        ["sqlite3", path], input=script, capture_output=True, text=True, check=True
    ).stdout
    return [float(t) * 1000 for t in re.findall(r"Run Time: real ([0-9.]+)", out)]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    d = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"knn_filters_{n}_{d}.db")
    if not os.path.exists(path):
        build(path, n, d)
    q = np.random.default_rng(1).standard_normal(d).astype(np.float32)
    head = f"select rowid from v where e match '[{', '.join(map(str, q.tolist()))}]' "
    print("| form | rows | shell first / median ms | apsw first / median ms |")
    print("| --- | --- | --- | --- |")
    for name, tail in FORMS.items():
        sql = head + tail
        apsw_ms, rows = apsw_times(path, sql)
        shell_ms = shell_times(path, sql)
        cells = [f"{t[0]:.1f} / {statistics.median(t[1:]):.1f}" for t in (shell_ms, apsw_ms)]
        print(f"| {name} | {rows} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
