"""Cold start (issue 25, item 6): what a new process or a new connection pays before it answers.

    python bench/cold_start.py                 # the command line: medians of 15 new processes
    python bench/cold_start.py commands A/bin B/bin  # two installs (before, after), in turn
    python bench/cold_start.py model           # where a hybrid search's time goes; the model's load
    python bench/cold_start.py vectors 1000000 # a new connection's first k-nearest query, 1M x 384
    python bench/cold_start.py connect         # a new process's first hybridsql.connect()
    python bench/cold_start.py embed           # a new process's first SQL embed(): the model ready
    python bench/cold_start.py embed all-MiniLM-L6-v2 multilingual-e5-small  # each, in turn

``commands`` (the default) times ``hybridsql --version``, ``--help``, a keyword search and a hybrid
search, each in 15 new processes taken in turn, on an index of two notes, and one query embedding by
LocalProvider in a warm process (the hybrid search embeds its query with the extension's embed();
the target is 1.3 x the keyword search, with either model: issue 41). The hybrid search runs on two
indexes, one made by the default model and one by ``--model multilingual-e5-small`` (where that
model is installed), searched without --model: the search runs the model the index records.
``model`` times each step of LocalProvider's first embedding in new processes (imports, the model
file read and opened, with the file in the cache folder and with none there that can be written,
when it is made in memory). ``vectors`` builds N x
384 random vectors in a vector_index table once (kept in $TMPDIR/hybridsql-cold/) and times, round
after round, a warm query, the first query of a new connection with SQLite's default I/O and with
memory-mapped reads, and the first query of a new process as `hybridsql.connect` opens it, each
as wall time and as user + system CPU time (steadier than the wall time on a shared machine; the
system time is the kernel's reads of the pages, most of a first query at 4 KiB pages:
docs/benchmarks.md, "Where a new connection's first query goes").
``connect`` times ``import hybridsql`` and its first ``hybridsql.connect()`` of a file in new
processes (the target is 5 ms; apsw's own import is timed apart), and sqlite-vec's open and load
where it is installed. ``embed`` times, in new processes with a connection open, the first SQL
``embed()`` (the model file found, read and opened, then one query embedded) against the second
(one query embedded), wall and CPU time (user + system), and the resident memory the first adds
(issue 33: the model ready in <= 20 ms, <= 40 MB resident added); given model names, each model
in turn (named by $HYBRIDSQL_MODEL, which embed() looks up as it would the default), with its
file's size. Both models' figures (2026-11-29, the word table copied as texts need it: the
hybrid search 1.07 to 1.10 x the keyword one with MiniLM, 1.14 to 1.17 x with
multilingual-e5-small, which was 1.61 to 1.69 x with the whole file copied; the model ready in
10.9 against 13.9 ms of CPU, 12.4 against 18.9 MB resident) and where e5's extra went:
docs/benchmarks.md, "The multilingual model's cost (issue 41)".
"""

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

RUNS = 15
D, K = 384, 10
KNN = f"select rowid, score from v where e match ? and k = {K}"
KEEP = os.path.join(tempfile.gettempdir(), "hybridsql-cold")


def median_ms(times: list) -> str:
    return f"median {statistics.median(times) * 1000:.0f} ms, min {min(times) * 1000:.0f} ms"


def wall(cmd: list, env=None) -> float:
    return run_timed(cmd, env)[0]


def run_timed(cmd: list, env=None) -> tuple:
    """The wall time and the CPU time (user and system, all threads) of one run of ``cmd``: on a
    shared machine the CPU time moves less with the load; the wall time shows what overlaps."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return elapsed, cpu


def notes_index(tmp: str, embedder: str, model: str | None = None) -> str:
    """An index of two notes, made with ``embedder`` (and ``model``, the local provider's)."""
    notes = os.path.join(tmp, "notes")
    os.makedirs(notes, exist_ok=True)
    with open(os.path.join(notes, "a.md"), "w") as f:
        f.write("# Alpha\n\nThe quick brown fox jumps over sqlite.\n")
    with open(os.path.join(notes, "b.md"), "w") as f:
        f.write("# Beta\n\nWAL mode and checkpoints.\n")
    db = os.path.join(tmp, f"{embedder}-{model}.db")
    subprocess.run(
        ["hybridsql", "index", notes, "--db", db, "--embedder", embedder]
        + (["--model", model] if model else []),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return db


E5 = "multilingual-e5-small"


def e5_installed() -> bool:
    """Whether multilingual-e5-small's weights are here (the multilingual extra, or its file in
    the cache folder already)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from hybridsql.embedding import models as m; m.ensure(m.resolve({E5!r}))",
        ],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


EMBED_ONE = r"""
import statistics, sys, time
from hybridsql.embedding.embedder import LocalProvider
p = LocalProvider(model=sys.argv[1] if len(sys.argv) > 1 else None)
p.embed(["warm up"])
times = []
for i in range(30):
    start = time.perf_counter()
    p.embed([f"the quick brown fox {i}"])
    times.append(time.perf_counter() - start)
print(statistics.median(times))
"""


def commands(bins: list) -> None:
    """``bins``: the bin folders of the installs to compare (their hybridsql and python), all
    timed in turn; by default the hybridsql on PATH and this Python."""
    installs = {b: (os.path.join(b, "hybridsql"), os.path.join(b, "python")) for b in bins} or {
        "": ("hybridsql", sys.executable)
    }
    with tempfile.TemporaryDirectory() as tmp:
        keyword_db = notes_index(tmp, "none")
        hybrid_db = notes_index(tmp, "local")
        e5_db = notes_index(tmp, "local", E5) if e5_installed() else None
        cmds = {"python -c pass": [sys.executable, "-c", "pass"]}
        for label, (exe, _) in installs.items():
            tag = f" [{label}]" if label else ""
            cmds.update(
                {
                    f"hybridsql --version{tag}": [exe, "--version"],
                    f"hybridsql --help{tag}": [exe, "--help"],
                    f"search --mode keyword{tag}": [
                        exe,
                        "search",
                        "fox",
                        "--db",
                        keyword_db,
                        "--mode",
                        "keyword",
                    ],
                    f"search (hybrid){tag}": [exe, "search", "fox", "--db", hybrid_db],
                }
            )
            if e5_db:  # the index records its model: the search is not told it
                cmds[f"search (hybrid, e5){tag}"] = [exe, "search", "fox", "--db", e5_db]
        for cmd in cmds.values():  # each once first: the cached optimized model is written
            wall(cmd)
        times = {name: [] for name in cmds}
        cpu = {name: [] for name in cmds}
        for _ in range(RUNS):  # in turn, so that every command sees the same load
            for name, cmd in cmds.items():
                elapsed, used = run_timed(cmd)
                times[name].append(elapsed)
                cpu[name].append(used)
        for name in cmds:
            print(f"{name}: wall {median_ms(times[name])}; CPU {median_ms(cpu[name])}", flush=True)
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
        hybrids = (
            {"": "search (hybrid)", " e5": "search (hybrid, e5)"}
            if e5_db
            else {"": "search (hybrid)"}
        )
        for label, (_, python) in installs.items():
            tag = f" [{label}]" if label else ""
            keyword = statistics.median(times[f"search --mode keyword{tag}"])
            keyword_cpu = statistics.median(cpu[f"search --mode keyword{tag}"])
            for which, name in hybrids.items():
                model = [E5] if which else []
                embeds = [
                    float(
                        subprocess.run(
                            [python, "-c", EMBED_ONE, *model],
                            capture_output=True,
                            text=True,
                            check=True,
                        ).stdout
                    )
                    for _ in range(3)
                ]
                embed_one = statistics.median(embeds)
                hybrid = statistics.median(times[f"{name}{tag}"])
                hybrid_cpu = statistics.median(cpu[f"{name}{tag}"])
                ratio = hybrid / (keyword + embed_one)
                print(
                    f"hybrid{which} / keyword search{tag} = wall {hybrid / keyword:.2f} x,"
                    f" CPU {hybrid_cpu / keyword_cpu:.2f} x (target 1.3 x)"
                )
                print(
                    f"one query embedding{which}, warm{tag}: {embed_one * 1000:.1f} ms; hybrid /"
                    f" (keyword + one embedding) = {hybrid * 1000:.0f} / ({keyword * 1000:.0f} +"
                    f" {embed_one * 1000:.1f}) = {ratio:.2f} x"
                )


# One new process: each step of a hybrid search's model work, timed in order.
STEPS = r"""
import json, os, sys, time
marks = [("start", time.perf_counter())]
def mark(name):
    marks.append((name, time.perf_counter()))
import numpy
mark("import numpy")
from hybridsql.embedding import local_model as embed
mark("import hybridsql.embedding.local_model")
embed._load_local()
mark("the model file read and opened")
embed.LocalProvider().embed(["the quick brown fox"])
mark("first query embedding")
embed.LocalProvider().embed(["a second query"])
mark("second query embedding")
print(json.dumps({b[0]: b[1] - a[1] for a, b in zip(marks, marks[1:])}))
"""


def model() -> None:
    import json

    with tempfile.TemporaryDirectory() as cache:
        variants = {
            "no cache (HYBRIDSQL_CACHE_DIR unwritable)": {"HYBRIDSQL_CACHE_DIR": "/proc/none"},
            "the model file in the cache folder": {"HYBRIDSQL_CACHE_DIR": cache},
        }
        env = dict(os.environ, HYBRIDSQL_CACHE_DIR=cache)
        subprocess.run([sys.executable, "-c", STEPS], env=env, check=True, capture_output=True)
        steps = {name: {} for name in variants}
        for _ in range(RUNS):
            for name, extra in variants.items():
                out = subprocess.run(
                    [sys.executable, "-c", STEPS],
                    env=dict(os.environ, **extra),
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                for step, seconds in json.loads(out).items():
                    steps[name].setdefault(step, []).append(seconds)
        for name, found in steps.items():
            print(f"{name} (median of {RUNS} new processes, ms):")
            for step, seconds in found.items():
                print(f"  {step}: {statistics.median(seconds) * 1000:.1f}")


# -- the first k-nearest query of a new connection ----------------------------------------------


def vectors_file(n: int) -> str:
    """n x 384 random float32 vectors in a vector_index table of their own, made once."""
    import numpy as np

    import hybridsql

    os.makedirs(KEEP, exist_ok=True)
    path = os.path.join(KEEP, f"vectors_{n}_{D}.db")
    if os.path.exists(path):
        return path
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + ".part" + suffix):
            os.remove(path + ".part" + suffix)
    conn = hybridsql.connect(path + ".part", backend="extension")
    conn.execute(
        f"create virtual table v using vector_index(e float[{D}], project integer partition key,"
        " tag integer)"
    )
    rng = np.random.default_rng(7)
    for base in range(0, n, 50_000):
        block = rng.standard_normal((min(50_000, n - base), D)).astype(np.float32)
        rows = [(base + i + 1, (base + i) % 10, v.tobytes()) for i, v in enumerate(block)]
        with conn:
            conn.executemany("insert into v(rowid, project, tag, e) values (?, 0, ?, ?)", rows)
    conn.execute("pragma wal_checkpoint(truncate)")
    conn.close()
    os.rename(path + ".part", path)
    return path


# A new process: opens the file as hybridsql.connect does, then times its first query alone
# (wall, user and system CPU seconds).
FIRST_IN_PROCESS = f"""
import resource, sys, time, numpy as np, hybridsql
conn = hybridsql.connect(sys.argv[1], backend="extension")
q = np.random.default_rng(int(sys.argv[2])).standard_normal({D}).astype(np.float32).tobytes()
before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
conn.execute({KNN!r}, (q,)).fetchall()
wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
print(wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime)
"""


def timed_query(conn, blob) -> tuple:
    """One query's rows, and its wall, user and system CPU seconds: on the shared machine the
    wall time moves with the load, and the system time is the kernel's reads of the pages."""
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    rows = conn.execute(KNN, (blob,)).fetchall()
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    return rows, (wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime)


def vectors(n: int, rounds: int = 9) -> None:
    import numpy as np

    import hybridsql

    path = vectors_file(n)
    queries = np.random.default_rng(1).standard_normal((100, D)).astype(np.float32)
    blobs = [q.tobytes() for q in queries]
    warm_conn = hybridsql.connect(path, backend="extension")
    for blob in blobs[:3]:
        warm_conn.execute(KNN, (blob,)).fetchall()
    mmaps = {
        "fresh, mmap_size 0": 0,
        "fresh, mmap_size 64 GiB": 1 << 36,
        "fresh, as connect() opens": None,
    }
    found = {"warm": [], **{name: [] for name in mmaps}, "new process, as connect() opens": []}
    answers = {}
    for r in range(rounds):
        for i in range(3):
            found["warm"].append(timed_query(warm_conn, blobs[3 + 3 * r + i])[1])
        for name, mmap in mmaps.items():
            conn = hybridsql.connect(path, backend="extension")
            if mmap is not None:
                conn.execute(f"pragma mmap_size = {mmap}")
            rows, times = timed_query(conn, blobs[50 + r])
            found[name].append(times)
            answers.setdefault(r, rows)
            if answers[r] != rows:
                raise SystemExit(f"round {r}: {name} answered {rows}, not {answers[r]}")
            conn.close()
        out = subprocess.run(
            [sys.executable, "-c", FIRST_IN_PROCESS, path, str(r)],
            capture_output=True,
            text=True,
            check=True,
        )
        found["new process, as connect() opens"].append(tuple(map(float, out.stdout.split())))
    mmap_now = warm_conn.execute("pragma mmap_size").fetchone()[0]
    warm = statistics.median(t[0] for t in found["warm"])
    warm_cpu = statistics.median(t[1] + t[2] for t in found["warm"])
    print(
        f"{n:,} x {D}, {rounds} rounds (connect() sets mmap_size {mmap_now}), load average"
        f" {os.getloadavg()[0]:.1f}; medians, wall (user + system CPU):"
    )
    for name, times in found.items():
        ms = statistics.median(t[0] for t in times)
        user = statistics.median(t[1] for t in times)
        system = statistics.median(t[2] for t in times)
        cpu = statistics.median(t[1] + t[2] for t in times)
        print(
            f"  {name}: {ms * 1000:.1f} ms ({ms / warm:.2f} x warm), CPU {user * 1000:.1f} +"
            f" {system * 1000:.1f} ms ({cpu / warm_cpu:.2f} x warm)"
        )


# A new process: apsw's import, then hybridsql's import and first connect, timed apart.
FIRST_CONNECT = """
import sys, time
start = time.perf_counter()
import apsw
imported = time.perf_counter()
import hybridsql
hybridsql.connect(sys.argv[1])
print(imported - start, time.perf_counter() - imported)
"""

VEC_CONNECT = """
import sys, time, apsw, sqlite_vec
start = time.perf_counter()
conn = apsw.Connection(sys.argv[1])
conn.enable_load_extension(True)
conn.load_extension(sqlite_vec.loadable_path())
print(time.perf_counter() - start)
"""


def connect() -> None:
    import importlib.util

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mem.db")
        scripts = {"import apsw, then import hybridsql + first connect": FIRST_CONNECT}
        if importlib.util.find_spec("sqlite_vec"):
            scripts["sqlite-vec: open + load"] = VEC_CONNECT
        for script in scripts.values():  # once first: the file is made, .pyc files written
            subprocess.run([sys.executable, "-c", script, path], check=True, capture_output=True)
        found = {name: [] for name in scripts}
        for _ in range(RUNS):
            for name, script in scripts.items():
                out = subprocess.run(
                    [sys.executable, "-c", script, path],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                found[name].append([float(x) for x in out.split()])
        for name, rows in found.items():
            parts = " + ".join(
                f"{statistics.median(column) * 1000:.1f}" for column in zip(*rows, strict=True)
            )
            print(f"{name} (median of {RUNS} new processes): {parts} ms")


EMBED_STEPS = r"""
import json, os, time, hybridsql
def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
conn = hybridsql.connect(":memory:")
conn.execute("select 1").fetchall()
before, start, cpu = rss(), time.perf_counter(), time.process_time()
conn.execute("select embed('deploy freeze')").fetchall()
first, added = time.perf_counter() - start, rss() - before
first_cpu = time.process_time() - cpu
start, cpu = time.perf_counter(), time.process_time()
conn.execute("select embed('a second query')").fetchall()
second, second_cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps([first, second, added, first_cpu, second_cpu]))
"""


def embed_sql(names: list) -> None:
    """``names``: the models to time, each in turn ($HYBRIDSQL_MODEL); none: the default."""
    import json

    from hybridsql.embedding import models

    env = {name: dict(os.environ, HYBRIDSQL_MODEL=name) for name in names} or {"": None}
    for name in names:  # made once where they are not yet, untimed
        models.ensure(models.resolve(name))
    runs = {name: [] for name in env}
    for _ in range(RUNS):
        for name, environ in env.items():
            out = subprocess.run(
                [sys.executable, "-c", EMBED_STEPS],
                capture_output=True,
                text=True,
                check=True,
                env=environ,
                cwd=tempfile.gettempdir(),  # not a checkout, whose hybridsql/ may be unbuilt
            ).stdout
            runs[name].append(json.loads(out))
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    for name, found in runs.items():
        first, second, added, first_cpu, second_cpu = ([run[i] for run in found] for i in range(5))
        path = models.resolve(name or None).path
        print(f"{name or 'the default model'}: its file {path.stat().st_size:,} bytes")
        print(f"  first embed() of a new process: {median_ms(first)}")
        print(f"  second embed(): {median_ms(second)}")
        print(
            f"  the model ready (first less second): "
            f"{(statistics.median(first) - statistics.median(second)) * 1000:.1f} ms wall,"
            f" {(statistics.median(first_cpu) - statistics.median(second_cpu)) * 1000:.1f} ms"
            f" CPU (user + system);"
            f" resident memory the first adds: {statistics.median(added):.1f} MB"
            f" (median of {RUNS} new processes)"
        )


def main() -> None:
    args = sys.argv[1:]
    which = args[0] if args else "commands"
    if which == "commands":
        commands(args[1:])
    elif which == "model":
        model()
    elif which == "vectors":
        vectors(int(args[1]) if len(args) > 1 else 1_000_000)
    elif which == "connect":
        connect()
    elif which == "embed":
        embed_sql(args[1:])
    else:
        raise SystemExit(f"unknown part {which!r}: commands, model, vectors, connect or embed")


if __name__ == "__main__":
    main()
