"""Shared fixtures: fresh databases with hybridsql loaded, a memory folder from examples/, the
SciFact records vendored in tests/data/scifact, and an OpenAI-compatible embedding server."""

import base64
import contextlib
import gzip
import json
import os
import platform
import pty
import queue
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import islice

import apsw
import numpy as np
import pytest

import hybridsql

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples", "memory")
SCIFACT = os.path.join(ROOT, "tests", "data", "scifact")
# The installed command. Not `python -m hybridsql`: from the checkout, that would import the
# source tree (uncompiled in a clean clone) instead of the installed package.
HYBRIDSQL = os.path.join(os.path.dirname(sys.executable), "hybridsql")
SHELL = shutil.which("sqlite3")  # the stock sqlite3 shell


def run_sqlite3(db, *statements):
    """The stock sqlite3 shell on ``db`` with ``statements`` on its command line after ``.load``
    of the extension: the CompletedProcess (text)."""
    return subprocess.run(
        [SHELL, db, f".load {hybridsql.loadable_path()}", *statements],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# Environment in which sqlite-utils and Datasette run on Python's own sqlite3, as where pysqlite3
# is not installed: a sitecustomize.py on PYTHONPATH makes `import pysqlite3` fail. On a Python
# built without enable_load_extension (pyenv's default, this project's CI) that sqlite3 cannot load
# the extension, and hybridsql says once why, in this line.
WITHOUT_PYSQLITE3 = {
    "PYTHONPATH": os.pathsep.join(
        p
        for p in (os.path.join(ROOT, "tests", "without_pysqlite3"), os.environ.get("PYTHONPATH"))
        if p
    )
}
STDLIB_LOADS_EXTENSIONS = hasattr(sqlite3.Connection, "enable_load_extension")
# The platforms with a pysqlite3 wheel (0.6.1), where `pip install pysqlite3` needs no compiler.
PYSQLITE3_FIX = "`pip install pysqlite3` gives sqlite-utils and Datasette a sqlite3 that can"
WHEELS = {("linux", "x86_64"), ("darwin", "arm64"), ("win32", "amd64"), ("win32", "x86")}
if (sys.platform, platform.machine().lower()) not in WHEELS:
    PYSQLITE3_FIX = (
        "pysqlite3, which sqlite-utils and Datasette would use instead, has no wheel for"
        f" {platform.system()} {platform.machine()}: `pip install pysqlite3` compiles it (with a C"
        " compiler and SQLite's headers), or use a Python whose sqlite3 loads extensions"
    )
PYTHON_ONLY_LINE = (
    "hybridsql: Python's sqlite3 cannot load extensions (this Python was built without them), so"
    " its connections have hybridsql's SQL functions in Python but no vector_index tables (a query"
    " of an index's vectors fails, and Datasette cannot open an index) and no bm25_candidate();"
    f" {PYSQLITE3_FIX}. The hybridsql command and apsw have everything."
)


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory):
    """The local model's file (engine.model_path, in extension.cache_dir) is written for the
    session's processes in a folder of the session's, not in the user's cache."""
    os.environ["HYBRIDSQL_CACHE_DIR"] = str(tmp_path_factory.mktemp("model-cache"))


@pytest.fixture(scope="session")
def model_file(model_cache):
    """The model file, written once for the session where the extension looks last: the
    session's cache folder (HYBRIDSQL_CACHE_DIR, model_cache)."""
    from hybridsql.db.extension import cache_dir
    from hybridsql.embedding import engine

    path = engine.model_path()
    if not path.is_file():
        engine.write_model()
    assert path == cache_dir() / engine.MODEL_FILE
    return path


def run_hybridsql(*args, cwd=None, input=None, **env):
    """The installed ``hybridsql`` command with ``args``, its output piped: the CompletedProcess
    (text). ``input`` goes to its stdin; ``env`` is added to the environment."""
    return subprocess.run(
        [HYBRIDSQL, *args],
        cwd=cwd,
        input=input,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def run_on_tty(argv, cwd=None, **env):
    """``argv`` with stdout and stderr on a terminal (a pty), so that it prints for a person:
    its exit code and what it showed (line ends as \\n). ``env`` is added to the environment.
    Killed, and the test failed, if it has not ended within DEADLINE seconds."""
    master, slave = pty.openpty()
    out = b""
    with spawned(
        argv,
        cwd=cwd,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
    ) as process:
        os.close(slave)
        end = time.monotonic() + DEADLINE
        try:
            while True:
                ready, _, _ = select.select([master], [], [], max(0.0, end - time.monotonic()))
                if not ready:
                    raise AssertionError(f"{argv} did not end in {DEADLINE} s: {out!r}")
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the command has closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            code = process.wait(timeout=max(1.0, end - time.monotonic()))
        finally:
            os.close(master)
    return code, out.decode().replace("\r\n", "\n")


# How long a test waits on a process it started before it fails and kills it: far more than any
# step takes on a loaded machine (load 20 on 2 cores), and never waited out by a passing test.
DEADLINE = 300


@contextlib.contextmanager
def spawned(argv, **popen):
    """``argv`` started in a session (process group) of its own and, when the block ends,
    whatever happens in it, killed with every process of its group: a test that fails or times
    out leaves nothing running, whatever signals it ignores (nohup, a script's background job).
    A process that moves to a session of its own (Litestream under replicate) is its parent's
    to stop: hybridsql's replicate stops it when it dies (PR_SET_PDEATHSIG)."""
    proc = subprocess.Popen(argv, start_new_session=True, **popen)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=DEADLINE)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


class Lines:
    """The lines of a process's pipe, read by a thread of their own, so that a test waits for
    one with a deadline instead of blocking on a process that never writes it."""

    def __init__(self, stream):
        self.lines: queue.Queue = queue.Queue()
        self.seen: list = []
        thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        thread.start()

    def _read(self, stream):
        with contextlib.suppress(ValueError, OSError):  # closed by spawned() as the test ends
            for line in stream:
                self.lines.put(line)
        self.lines.put(None)

    def next(self, timeout=DEADLINE):
        """The next line, or None at the end of the stream; AssertionError after ``timeout``
        seconds without one."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line in {timeout} s") from None
        if line is None:
            self.lines.put(None)
        else:
            self.seen.append(line)
        return line

    def until(self, wanted, timeout=DEADLINE):
        """The lines read up to the first in which ``wanted`` is; AssertionError, with what was
        read, at the end of the stream or after ``timeout`` seconds."""
        end = time.monotonic() + timeout
        got = []
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {wanted!r} in {timeout} s: {''.join(got)}") from None
            if line is None:
                self.lines.put(None)
                raise AssertionError(f"the stream ended before {wanted!r}: {''.join(got)}")
            got.append(line)
            self.seen.append(line)
            if wanted in line:
                return got

    def rest(self, timeout=DEADLINE):
        """Every line up to the end of the stream; AssertionError after ``timeout`` seconds."""
        end = time.monotonic() + timeout
        got = []
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"the stream did not end in {timeout} s: {''.join(got)}"
                ) from None
            if line is None:
                self.lines.put(None)
                return "".join(got)
            got.append(line)
            self.seen.append(line)


def read_scifact(name, count):
    """The first count records of SciFact's corpus or queries, as tests/data/scifact holds them."""
    with gzip.open(os.path.join(SCIFACT, f"{name}.jsonl.gz"), "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in islice(f, count)]
    assert len(records) == count, f"tests/data/scifact/{name}.jsonl.gz has {len(records)} lines"
    return records


@pytest.fixture
def fresh_db(tmp_path):
    """An apsw connection to a new database file with the native extension loaded."""
    conn = hybridsql.connect(str(tmp_path / "fresh.db"), backend="extension")
    yield conn
    conn.close()


@pytest.fixture(scope="session")
def example_db(tmp_path_factory):
    """Path of a closed database with examples/memory indexed on the local model.

    Copy it before writing to it; its embedding cache makes re-indexing the examples instant.
    """
    from hybridsql.indexing.index import HybridIndex

    path = str(tmp_path_factory.mktemp("examples") / "examples.db")
    with HybridIndex(path, embedder="local") as idx:
        idx.index_folder(EXAMPLES)
    return path


@pytest.fixture
def memory_dir(tmp_path):
    """A writable copy of the example memory folder."""
    dest = tmp_path / "memory-folder"
    shutil.copytree(EXAMPLES, dest)
    return dest


def check_fts(conn):
    """FTS5's integrity-check of every full-text table against its content. chunks_fts's content
    table, chunks, holds the memories too, which that check would count as missing: its words are
    compared instead with those of a table made afresh from the documents."""
    for table in ("chunks_trigram", "memories_fts", "memories_trigram"):
        conn.execute(f"insert into {table}({table}, rank) values ('integrity-check', 1)")
    conn.execute("insert into chunks_fts(chunks_fts, rank) values ('integrity-check', 0)")
    fresh = apsw.Connection(":memory:")
    fresh.execute(
        "create virtual table chunks_fts using fts5(text,"
        " tokenize='porter unicode61 remove_diacritics 2')"
    )
    rows = conn.execute("select id, text from chunks where kind = 'document'").fetchall()
    fresh.executemany("insert into chunks_fts(rowid, text) values (?, ?)", rows)
    words = "select term, doc, col, offset from temp.chunks_fts_words order by 1, 2, 3, 4"
    for c in (conn, fresh):
        c.execute(
            "create virtual table if not exists temp.chunks_fts_words"
            " using fts5vocab(main, chunks_fts, instance)"
        )
    assert conn.execute(words).fetchall() == fresh.execute(words).fetchall()
    fresh.close()


# A command the tests stop with Ctrl-C (SIGINT) must hear it, also where this process was
# started with SIGINT ignored (a background job of a shell script): ignored, it would pass to
# every child as ignored, while a handled signal is reset to its default by exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# The same for the signals the tests stop commands with, where this process was started with
# them ignored (SIGHUP under nohup): they stay ignored here, by a handler that does nothing, so
# that the suite outlives its terminal as nohup asked, and every child starts at the default.
for _number in (signal.SIGHUP, signal.SIGTERM):
    if signal.getsignal(_number) is signal.SIG_IGN:
        signal.signal(_number, lambda *_: None)


def letter_counts(text):
    """A text's vector on the embedding server: how often each letter a-z occurs in it."""
    lower = text.lower()
    return [float(lower.count(chr(c))) for c in range(ord("a"), ord("z") + 1)]


class _EmbeddingHandler(BaseHTTPRequestHandler):
    """POST /v1/embeddings as OpenAI answers it (floats, or base64 when asked, as the openai
    SDK does). A request with a text containing the server's ``hold`` waits for ``release``;
    one with its ``refuse`` is answered HTTP 400."""

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        texts = [request["input"]] if isinstance(request["input"], str) else request["input"]
        if self.server.hold and any(self.server.hold in t for t in texts):
            self.server.holding.set()
            self.server.release.wait()
        if self.server.refuse and any(self.server.refuse in t for t in texts):
            self.send_response(400)
            self.send_header("Content-Length", "7")
            self.end_headers()
            self.wfile.write(b"refused")
            return
        self.server.texts += texts
        items = []
        for i, text in enumerate(texts):
            vector = letter_counts(text)
            if request.get("encoding_format") == "base64":
                vector = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
            items.append({"object": "embedding", "index": i, "embedding": vector})
        payload = json.dumps({"object": "list", "data": items, "model": request["model"]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def embedding_server():
    """An OpenAI-compatible embedding server on 127.0.0.1 (``base_url`` ends in /v1); set
    ``hold`` to make requests with that text wait until ``release`` is set, ``refuse`` to have
    them refused."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _EmbeddingHandler)
    srv.hold, srv.holding, srv.release, srv.texts = None, threading.Event(), threading.Event(), []
    srv.refuse = None
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    srv.base_url = f"http://127.0.0.1:{srv.server_port}/v1"
    yield srv
    srv.release.set()
    srv.shutdown()
    srv.server_close()
