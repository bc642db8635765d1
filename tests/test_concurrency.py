"""Concurrency: writer processes index files and add memories while reader processes search.

Real processes (this file run as a script), one SQLite file in WAL mode, for a bounded time.
Each writer drops new markdown files, each with a token of its own, into its own folder and into
a folder that every writer indexes, indexes both, and adds memories through MemoryStore; each
reader searches (HybridIndex.search in every mode and backend, MemoryStore.search, which also
writes the recall) and reopens its index now and then. Every process counts what it did and
every exception it saw. Afterwards nothing may be lost (every file and memory a writer reported
is in the index and found by its token), the database and both FTS5 indexes pass their integrity
checks, and no process saw an error, 'database is locked' above all.

The embedding provider is a hash (HashProvider below): the test is about SQLite, and twelve
processes of the local model would not fit two cores. The suite runs 4 writers and 8 readers
for CONCURRENCY_SECONDS (20); the long run is documented in docs/reliability.md.
"""

import hashlib
import json
import os
import random
import subprocess
import sys
import threading
import time

import numpy as np
from conftest import EXAMPLES, check_fts

SECONDS = float(os.environ.get("HYBRIDSQL_CONCURRENCY_SECONDS", "20"))
WRITERS, READERS = 4, 8


class HashProvider:
    """A deterministic embedding: words hashed into 64 dimensions, so similar texts are near."""

    model_id = "hash-64"
    dims = 64

    def embed(self, texts):
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, hashlib.blake2b(word.encode(), digest_size=2).digest()[0] % self.dims] += 1
        return out


def open_store(db):
    from hybridsql.indexing.index import HybridIndex
    from hybridsql.memory import MemoryStore

    idx = HybridIndex(db, embedder=HashProvider())
    return idx, MemoryStore(idx)


def writer(db, folder, shared, seconds, name):
    """Files and memories, each with its own token; reports what was written and every error."""
    idx, store = open_store(db)
    rng = random.Random(name)
    done = {"files": [], "memories": [], "errors": [], "index_runs": 0}
    deadline, n = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        n += 1
        target = shared if n % 3 == 0 else folder
        token = f"tok{name}n{n}"
        path = os.path.join(target, f"{name}-{n}.md")
        with open(path, "w") as f:
            f.write(f"# Note {n} of {name}\n\n{token} deploy billing {rng.random()}\n")
        try:
            idx.index_folder(target)
            done["index_runs"] += 1
            done["files"].append([target, os.path.basename(path), token])
            memory = store.add(f"memory {token}m agent decided {rng.random()}", project=name)
            done["memories"].append([memory.id, f"{token}m"])
        except Exception as e:  # counted, and the test fails on any
            done["errors"].append(f"{type(e).__name__}: {e}")
    idx.close()
    return done


def reader(db, seconds, name):
    """Searches of every kind until the deadline; reports how many, and every error."""
    from hybridsql.search import BACKENDS

    idx, store = open_store(db)
    rng = random.Random(name)
    done = {"searches": 0, "found": 0, "errors": [], "reopens": 0}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        query = rng.choice(
            ["deploy billing", f"tokw{rng.randrange(4)}n{rng.randrange(50)}", "note"]
        )
        try:
            if rng.random() < 0.2:
                found = store.search(query, mode=rng.choice(["keyword", "hybrid"]))
            else:
                found = idx.search(
                    query,
                    mode=rng.choice(["keyword", "hybrid", "semantic"]),
                    backend=rng.choice(BACKENDS),
                )
            done["searches"] += 1
            done["found"] += len(found)
            if rng.random() < 0.02:
                idx.close()
                idx, store = open_store(db)
                done["reopens"] += 1
        except Exception as e:
            done["errors"].append(f"{type(e).__name__}: {e}")
    idx.close()
    return done


def run_workers(db, root, seconds, writers=WRITERS, readers=READERS):
    """Starts the processes together; returns the reports of the writers and of the readers."""
    shared = os.path.join(root, "shared")
    os.makedirs(shared, exist_ok=True)
    procs = []
    for w in range(writers):
        folder = os.path.join(root, f"w{w}")
        os.makedirs(folder, exist_ok=True)
        args = ["writer", db, folder, shared, str(seconds), f"w{w}"]
        procs.append(subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE))
    for r in range(readers):
        args = ["reader", db, str(seconds), f"r{r}"]
        procs.append(subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE))
    reports = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=seconds + 300)
            assert p.returncode == 0, f"a worker died with {p.returncode}"
            reports.append(json.loads(out))
    finally:
        for p in procs:  # none left behind when one fails
            p.kill()
            p.wait()
    return reports[:writers], reports[writers:]


def check_integrity(conn):
    assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]
    check_fts(conn)
    orphans = conn.execute(
        "select count(*) from vectors where chunk_id not in (select id from chunks)"
    ).fetchone()[0]
    assert orphans == 0


def test_writers_and_readers_lose_nothing_and_never_see_locked(tmp_path):
    import hybridsql

    db = str(tmp_path / "busy.db")
    idx, _ = open_store(db)  # the schema, before the crowd arrives
    idx.close()
    writers, readers = run_workers(db, str(tmp_path), SECONDS)

    errors = [e for r in writers + readers for e in r["errors"]]
    assert errors == [], errors[:5]
    files = [f for w in writers for f in w["files"]]
    memories = [m for w in writers for m in w["memories"]]
    searches = sum(r["searches"] for r in readers)
    print(
        f"\n{WRITERS} writers, {READERS} readers, {SECONDS:g}s: {len(files)} files and "
        f"{len(memories)} memories written, {sum(w['index_runs'] for w in writers)} index runs, "
        f"{searches} searches, {sum(r['reopens'] for r in readers)} reopens, 0 errors"
    )
    assert len(files) >= WRITERS and len(memories) >= WRITERS and searches >= READERS

    conn = hybridsql.connect(db)  # the extension: vectors, and its integrity check
    check_integrity(conn)
    indexed = {(root, path) for root, path in conn.execute("select root, path from files")}
    lost = [(root, path) for root, path, _ in files if (root, path) not in indexed]
    assert lost == [], f"{len(lost)} of {len(files)} files lost, e.g. {lost[:3]}"
    assert len(indexed) == len(files)
    for _, _, token in files:
        hits = conn.execute(
            "select count(*) from chunks_fts where chunks_fts match ?", (f'"{token}"',)
        ).fetchone()[0]
        assert hits == 1, token
    stored = dict(
        conn.execute("select m.chunk_id, c.text from memories m join chunks c on c.id = m.chunk_id")
    )
    assert len(stored) == len(memories)
    for memory_id, token in memories:
        assert token in stored[memory_id].split(), (memory_id, token)
    missing = conn.execute(
        "select count(*) from chunks c left join vectors v on v.chunk_id = c.id"
        " where v.chunk_id is null"
    ).fetchone()[0]
    assert missing == 0


# -- one index, shared by threads ------------------------------------------------------------

THREADS, CALLS = 8, 40


def test_one_index_and_store_shared_by_eight_threads_lose_nothing_and_raise_nothing(tmp_path):
    """As an agent's web server shares them: every thread adds memories, indexes files of its
    own, and searches (documents and memories, every mode and backend), CALLS times each, all
    started together."""
    from hybridsql.search import BACKENDS

    idx, store = open_store(str(tmp_path / "shared.db"))
    idx.index_folder(EXAMPLES)
    start = threading.Barrier(THREADS)
    done = {t: {"files": [], "memories": [], "errors": []} for t in range(THREADS)}

    def work(t):
        rng, folder = random.Random(t), tmp_path / f"t{t}"
        folder.mkdir()
        start.wait()
        for n in range(CALLS):
            token = f"tokt{t}n{n}"
            try:
                if n % 3 == 0:
                    (folder / f"{n}.md").write_text(f"# Note {n}\n\n{token} deploy billing\n")
                    idx.index_folder(str(folder))
                    done[t]["files"].append((f"{n}.md", token))
                elif n % 3 == 1:
                    memory = store.add(f"memory {token}m agent decided", project=f"t{t}")
                    done[t]["memories"].append((memory.id, f"{token}m"))
                elif rng.random() < 0.5:
                    store.search("agent decided", mode=rng.choice(["keyword", "hybrid"]))
                else:
                    idx.search(
                        "deploy billing",
                        mode=rng.choice(["keyword", "hybrid", "semantic"]),
                        backend=rng.choice(BACKENDS),
                    )
            except Exception as e:  # counted, and the test fails on any
                done[t]["errors"].append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    # Threads switch every few microseconds instead of every 5 ms, as they would on a
    # machine with cores to spare: two threads' calls overlap whatever this one's load.
    every = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(every)
    errors = [e for d in done.values() for e in d["errors"]]
    assert errors == [], f"{len(errors)} errors, e.g. {errors[:3]}"
    for d in done.values():
        for name, token in d["files"]:
            found = idx.search(token, mode="keyword", per_file=0)
            assert [(r.path, token in r.text) for r in found] == [(name, True)]
        for memory_id, token in d["memories"]:
            assert store.get(memory_id).content == f"memory {token} agent decided"
            assert [h.memory.id for h in store.search(token, mode="keyword")] == [memory_id]
    check_integrity(idx.conn)
    idx.close()


def test_a_second_threads_call_waits_for_the_first_to_return(tmp_path):
    """The first thread is inside start_session's transaction (its clock is read there) when
    the second adds a memory: the add waits for the session to be written, where it began a
    transaction inside the other's ("cannot start a transaction within a transaction")."""
    idx, store = open_store(str(tmp_path / "two.db"))
    inside, second_returned, errors = threading.Event(), threading.Event(), []

    def clock():
        if threading.current_thread() is first:
            inside.set()
            # Until the second call returns: at once where it does not wait for this one,
            # else the wait ends, the session is written, and then the second call runs.
            second_returned.wait(timeout=2)
        return 1_800_000_000.0

    def add():
        inside.wait()
        try:
            added.append(store.add("a memory added while a session starts"))
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")
        second_returned.set()

    store.clock, added = clock, []
    first = threading.Thread(target=store.start_session)
    second = threading.Thread(target=add)
    second.start()
    first.start()
    first.join()
    second.join()
    assert errors == []
    assert [tuple(r) for r in idx.conn.execute("select id, started_at from sessions")] == [
        (1, 1_800_000_000.0)
    ]
    assert store.get(added[0].id).content == "a memory added while a session starts"
    idx.close()


if __name__ == "__main__":
    role, args = sys.argv[1], sys.argv[2:]
    if role == "writer":
        report = writer(args[0], args[1], args[2], float(args[3]), args[4])
    else:
        report = reader(args[0], float(args[1]), args[2])
    print(json.dumps(report))
