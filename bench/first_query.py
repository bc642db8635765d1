"""The first k-nearest query of a fresh connection, for callgrind: one build, one file.

    python bench/first_query.py BUILD/hybridsql.so FILE make N   # N random rows of 384 dims
    valgrind --tool=callgrind --toggle-collect=vx_filter \\
        python bench/first_query.py BUILD/hybridsql.so FILE query

callgrind counts instructions exactly whatever the machine's load; --toggle-collect=vx_filter
counts the extension's xFilter alone (every block read, summed and scanned), which needs a build
with its symbols (setup.py strips them: compile the C files of csrc/ with -g into one library
named hybridsql.so, docs/platforms.md's command with -g). FILE may be another bench's file with a
table `v` of 384 dimensions (bench/cold_start.py's 1M file: 426 M instructions on main at 5cdfca3,
387 M since a block just read is scanned without prefetching; docs/benchmarks.md).
"""

import sys

import apsw
import numpy as np


def main(library, path, mode, n="30000"):
    conn = apsw.Connection(path)
    conn.enable_load_extension(True)
    conn.load_extension(library)
    if mode == "make":
        conn.execute(
            "create virtual table v using vector_index(e float[384], project integer partition"
            " key, tag integer)"
        )
        rng = np.random.default_rng(1)
        rows = [
            (i + 1, i % 10, i // 10 % 10, rng.standard_normal(384).astype("<f4").tobytes())
            for i in range(int(n))
        ]
        with conn:
            conn.executemany("insert into v(rowid, project, tag, e) values (?, ?, ?, ?)", rows)
        return
    q = np.random.default_rng(99).standard_normal(384).astype("<f4").tobytes()
    print(conn.execute("select rowid from v where e match ? and k = 10", (q,)).fetchall())


if __name__ == "__main__":
    main(*sys.argv[1:])
