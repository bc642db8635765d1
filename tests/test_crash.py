"""Crashes: ``hybridsql index`` killed with SIGKILL at random points, again and again.

A folder of generated memory files is indexed by the real command in a subprocess, which is
killed at a random moment between 30 % and 100 % of the time an uninterrupted run takes (aiming
earlier when runs turn out quicker): while Python starts, while the schema is made, while chunks
are embedded (by an OpenAI-compatible server in this process, answering with hashes, so that
embedding is instant and its vectors can be checked), inside a file's transaction, while deleted
files are removed. Between runs files are rewritten, deleted and added, so that every run has
work to be killed in. After every kill the database must be consistent: integrity checks pass,
and every file in the index is whole, one version of the file that was on disk, chunk for chunk,
each vector that of its own chunk. At the end one run without a kill must complete the index.

The suite kills CRASH_KILLS (24) times; the long run is documented in docs/reliability.md.
"""

import hashlib
import json
import os
import random
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from conftest import HYBRIDSQL, check_fts

import hybridsql
from hybridsql.files.chunking import chunk_markdown

KILLS = int(os.environ.get("HYBRIDSQL_CRASH_KILLS", "24"))
FILES = 150
CHURN = 0.2  # the share of the files rewritten before each run
DIMS = 64
MODEL = "hash-64"
WORDS = (
    "deploy billing postgres migration ledgerline harbor gateway tide worker celery redis invoice"
    " stripe tracking container parcel dispatcher driver webhook carrier schema index vector"
    " keyword memory agent decision preference python tabs spaces review incident postmortem"
).split()


def hash_vector(text: str) -> list:
    """The embedding the server gives: words hashed into DIMS dimensions."""
    v = np.zeros(DIMS, dtype=np.float32)
    for word in text.lower().split():
        v[hashlib.blake2b(word.encode(), digest_size=2).digest()[0] % DIMS] += 1
    return v.tolist()


class Embeddings(BaseHTTPRequestHandler):
    """POST /embeddings, as OpenAI answers it."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data = [{"index": i, "embedding": hash_vector(t)} for i, t in enumerate(body["input"])]
        payload = json.dumps({"data": data}).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client was killed while it waited: what this test does

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def embeddings_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Embeddings)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


class Folder:
    """The memory folder, and every version of every file ever written to it."""

    def __init__(self, root, rng):
        self.root, self.rng, self.count = root, rng, 0
        self.versions = {}  # relative path -> {sha256: text}
        self.chunked = {}  # sha256 -> chunk texts

    def write(self, rel: str) -> None:
        rng = self.rng
        parts = [f"# {rel}\n"]
        for s in range(rng.randint(1, 5)):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 350)))
            parts.append(f"\n## Section {s}\n\n{words} {rng.random()}\n")
        text = "".join(parts)
        full = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)
        self.versions.setdefault(rel, {})[hashlib.sha256(text.encode()).hexdigest()] = text

    def add(self) -> None:
        self.count += 1
        day = f"2026-{1 + self.count % 12:02d}-{1 + self.count % 28:02d}"
        rel = f"memory/{day}.md" if self.count % 3 else f"notes/n{self.count}.md"
        if rel in self.on_disk():
            rel = f"notes/n{self.count}.md"
        self.write(rel)

    def chunks(self, rel: str, sha: str) -> list:
        """The chunk texts of one version of a file, as the indexer makes them."""
        if sha not in self.chunked:
            self.chunked[sha] = [c.text for c in chunk_markdown(self.versions[rel][sha])]
        return self.chunked[sha]

    def current(self) -> dict:
        """{path: sha256} of the files on disk now."""
        return {
            rel: hashlib.sha256(Path(self.root, rel).read_bytes()).hexdigest()
            for rel in self.on_disk()
        }

    def on_disk(self) -> set:
        found = set()
        for folder, _, names in os.walk(self.root):
            found.update(os.path.relpath(os.path.join(folder, n), self.root) for n in names)
        return found

    def churn(self) -> None:
        """Rewrites a share of the files, deletes two, adds two: work for the next run."""
        files = sorted(self.on_disk())
        for rel in self.rng.sample(files, int(len(files) * CHURN)):
            self.write(rel)
        for rel in self.rng.sample(files, 2):
            os.remove(os.path.join(self.root, rel))
        self.add()
        self.add()


def run_index(root, db, url, kill_after=None):
    """(exit status, seconds) of `hybridsql index`, killed with SIGKILL after kill_after s."""
    env = {
        **os.environ,
        "HYBRIDSQL_OPENAI_BASE_URL": url,
        "HYBRIDSQL_OPENAI_MODEL": MODEL,
        "OPENAI_API_KEY": "",
    }
    cmd = [HYBRIDSQL, "index", root, "--db", db, "--embedder", "openai"]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        proc.wait(timeout=kill_after if kill_after is not None else 300)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    seconds = time.monotonic() - started
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    assert proc.returncode in (0, -9), f"hybridsql index failed ({proc.returncode}): {err}"
    return proc.returncode, seconds


def indexed_versions(db) -> dict:
    """{path: sha256} of the files in the index."""
    conn = hybridsql.connect(db)  # the extension: vectors, and its integrity check
    try:
        return dict(conn.execute("select path, sha256 from files"))
    finally:
        conn.close()


def check_consistent(db, folder) -> int:
    """Integrity, and every indexed file whole and one of its versions; returns the file count."""
    conn = hybridsql.connect(db)  # the extension: vectors, and its integrity check
    try:
        assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]
        check_fts(conn)
        strays = conn.execute(
            "select count(*) from chunks where kind = 'document'"
            " and file_id not in (select id from files)"
        ).fetchone()[0]
        assert strays == 0
        orphans = conn.execute(
            "select count(*) from vectors where chunk_id not in (select id from chunks)"
        ).fetchone()[0]
        assert orphans == 0
        files = conn.execute("select id, path, sha256 from files").fetchall()
        for file_id, path, sha in files:
            assert sha in folder.versions.get(path, {}), f"{path} is no version ever written"
            rows = conn.execute(
                "select c.text, v.model_id, v.vector from chunks c"
                " left join vectors v on v.chunk_id = c.id where c.file_id = ? order by c.id",
                (file_id,),
            ).fetchall()
            want = folder.chunks(path, sha)
            assert [r[0] for r in rows] == want, f"{path} is not whole"
            for text, model, vector in rows:
                if vector is not None:
                    assert model == MODEL
                    assert np.frombuffer(vector, "<f4").tolist() == hash_vector(text)
        return len(files)
    finally:
        conn.close()


def test_kill_9_at_random_points_then_the_next_run_completes(tmp_path, embeddings_url):
    rng = random.Random(20261121)
    root, db = str(tmp_path / "memory"), str(tmp_path / "index.db")
    folder = Folder(root, rng)
    for _ in range(FILES):
        folder.add()
    assert run_index(root, db, embeddings_url)[0] == 0
    check_consistent(db, folder)
    folder.churn()
    status, typical = run_index(root, db, embeddings_url)  # the length of a run to kill
    assert status == 0

    kills = finished = partial = 0
    while kills < KILLS:
        folder.churn()
        before = indexed_versions(db)
        status, seconds = run_index(root, db, embeddings_url, rng.uniform(0.3, 1.0) * typical)
        if status == -9:
            kills += 1
            after = indexed_versions(db)
            partial += before != after != folder.current()
        else:  # the run was quicker than the kill: aim earlier from now on
            finished += 1
            typical = (typical + seconds) / 2
        check_consistent(db, folder)
        assert kills + finished < 3 * KILLS, "the runs end before any kill"

    assert run_index(root, db, embeddings_url)[0] == 0
    indexed = check_consistent(db, folder)
    on_disk = folder.on_disk()
    assert indexed == len(on_disk)
    assert indexed_versions(db) == folder.current()
    conn = hybridsql.connect(db)  # the extension: vectors, and its integrity check
    unembedded = conn.execute(
        "select count(*) from chunks c left join vectors v on v.chunk_id = c.id"
        " where v.chunk_id is null"
    ).fetchone()[0]
    assert unembedded == 0
    conn.close()
    print(
        f"\n{kills} kills survived ({partial} mid-index: some files done, others not), "
        f"{finished} runs ended before their kill (a run took {typical:.2f}s); "
        f"{indexed} files consistent after each"
    )
