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
import time

import numpy as np
from conftest import check_fts

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
    from hybridsql.index import HybridIndex
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


if __name__ == "__main__":
    role, args = sys.argv[1], sys.argv[2:]
    if role == "writer":
        report = writer(args[0], args[1], args[2], float(args[3]), args[4])
    else:
        report = reader(args[0], float(args[1]), args[2])
    print(json.dumps(report))
