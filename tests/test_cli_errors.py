"""Every input that ended in a traceback (or, over MCP, in "Error executing tool" with a Python
exception), in one table: the command, or the MCP tool call, and the one line it must answer
with its exit code. Each row runs the installed ``hybridsql`` command (or a real ``hybridsql
mcp`` server over stdio), and checks that nothing was written: every file of the test's world,
databases and memory folders, has the same bytes after the row as before.

``how`` says how a row runs: ``run`` (plain), ``tty`` (stdout is a terminal), ``sigint``
(Ctrl-C once the index has committed a file), ``closed`` (stdout is a pipe nobody reads),
``churn`` (files are deleted while the folder is indexed), ``rofs`` (the database is on a
read-only file system) and ``full`` (on a full one); the last two mount a tmpfs in a private
mount namespace (``unshare``), and are skipped where that is not allowed.

The MCP server gets its calls as JSON-RPC lines written here rather than through the SDK's
client, which cannot send what some rows send: NaN and infinity (it writes null).
"""

import contextlib
import gzip
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime

import apsw
import pytest
from conftest import EXAMPLES, HYBRIDSQL, Lines, run_hybridsql, run_on_tty, spawned

import hybridsql
from hybridsql.cli import main
from hybridsql.db.schema import SCHEMA_VERSION, SEARCHABLE_FROM
from hybridsql.errors import QueryError
from hybridsql.indexing.index import VANISHED
from hybridsql.search import SearchOptions

# The SIMD path that SQL reports; --version says the same.
SIMD = hybridsql.connect(":memory:").execute("select hybridsql_simd()").fetchone()[0]

TODAY = datetime.now().strftime("%Y-%m-%d")
BIG = 2**63  # one past SQLite's largest integer
DAMAGED = "is damaged (database disk image is malformed); restore it from a backup or recover it with `sqlite3 {0} .recover`"


@dataclass
class Row:
    """One input and its answer. ``argv`` runs the command, ``mcp`` = (server, tool, arguments)
    calls a tool; ``line`` is the whole line expected (a str, exact, or a compiled regex) on
    stderr when ``code`` is not 0, on stdout when it is, and after "Error executing tool
    TOOL: " over MCP with the "hybridsql: " prefix left out. Names in braces are the world's
    paths."""

    what: str
    argv: list | None
    line: object
    code: int = 1
    mcp: tuple | None = None
    how: str = "run"


FOLDER_IS = "hybridsql: cannot open {folder}: it is a folder; name a database file in it"
NO_FILE = "hybridsql: {nope} does not exist; create an index with `hybridsql index DIR --db {nope}`"
NOT_OURS = "hybridsql: {other} is not a hybridsql index; create one with `hybridsql index DIR --db {other}`"
NEWER = (
    f"hybridsql: {{newer}} was made by a newer hybridsql (schema {SCHEMA_VERSION + 1}, this one "
    f"knows {SCHEMA_VERSION}); upgrade hybridsql to use it"
)
OLDER = (
    f"hybridsql: {{older}} was made by an older hybridsql (schema {SEARCHABLE_FROM - 1}); run "
    "`hybridsql index DIR --db {older}` to upgrade it"
)
NOT_SQLITE = (
    "hybridsql: {zeroed_header} is not a SQLite database (or its header is damaged); check the "
    "path, or restore the file from a backup"
)
READ_ONLY = (
    "hybridsql: cannot write {ro}/{name}: its file system is read-only; copy it somewhere writable"
)
LINK = "hybridsql: cannot write memory/{today}.md in the memory folder {dir}: {link} is a symbolic link (links are not followed)"
LIMIT = "hybridsql: {name} must be an integer from {low} to 10000, not {value}"
FINITE = "hybridsql: {name} must be a finite number, not {value}"
LONG = "hybridsql: the query is {n} characters long, over the limit of 1,000,000; search with its key sentences"
EXTRACT = ["memory", "extract", "--topic", "t", "--title", "T", "--content", "c", "--db", "{index}"]
NO_RESULTS = re.compile(r'^\{"query": "deploy", .*"results": \[\]\}$')

ROWS = [
    # -- the database file -------------------------------------------------------------------
    Row("--db is a folder", ["search", "deploy", "--db", "{folder}"], FOLDER_IS),
    Row("--db is a folder", ["index", "{examples}", "--db", "{folder}"], FOLDER_IS),
    Row("--db is a folder", ["mcp", "--db", "{folder}"], FOLDER_IS),
    Row(
        "--db in a folder that does not exist",
        ["index", "{examples}", "--db", "{missing}"],
        "hybridsql: cannot open {missing}: the folder {world}/missing does not exist",
    ),
    Row("--db mistyped: nothing is created", ["search", "deploy", "--db", "{nope}"], NO_FILE),
    Row("--db mistyped", ["memory", "search", "deploy", "--db", "{nope}"], NO_FILE),
    Row("--db mistyped", ["memory", "get", "1", "--db", "{nope}"], NO_FILE),
    Row("--db mistyped", ["memory", "delete", "1", "--db", "{nope}"], NO_FILE),
    Row("another application's database", ["search", "deploy", "--db", "{other}"], NOT_OURS),
    Row("another application's database", ["memory", "search", "x", "--db", "{other}"], NOT_OURS),
    Row(
        "another application's database", ["memory", "documents", "x", "--db", "{other}"], NOT_OURS
    ),
    Row("another application's database", ["memory", "timeline", "1", "--db", "{other}"], NOT_OURS),
    Row(
        "another application's database",
        ["memory", "session", "context", "1", "--db", "{other}"],
        NOT_OURS,
    ),
    Row(
        "another application's database", ["memory", "reinforce", "1", "--db", "{other}"], NOT_OURS
    ),
    Row(
        "another application's table called meta",
        ["index", "{examples}", "--db", "{other_meta}"],
        "hybridsql: {other_meta} is not a hybridsql index; use another file",
    ),
    Row("an index made by a newer hybridsql", ["search", "deploy", "--db", "{newer}"], NEWER),
    Row("an index made by a newer hybridsql", ["memory", "add", "x", "--db", "{newer}"], NEWER),
    Row("an index made by an older hybridsql", ["search", "deploy", "--db", "{older}"], OLDER),
    Row(
        "the last release's index (schema 1), read-only",
        ["memory", "documents", "deploy", "--db", "{schema1}"],
        "hybridsql: {schema1} was made by an older hybridsql (schema 1); run "
        "`hybridsql index DIR --db {schema1}` to upgrade it",
    ),
    Row(
        "a truncated database",
        ["search", "deploy", "--db", "{truncated}"],
        "hybridsql: {truncated} " + DAMAGED.format("{truncated}"),
    ),
    Row(
        "a truncated database",
        ["index", "{examples}", "--db", "{truncated}"],
        "hybridsql: {truncated} " + DAMAGED.format("{truncated}"),
    ),
    Row("a zeroed first page", ["search", "deploy", "--db", "{zeroed_header}"], NOT_SQLITE),
    Row("a zeroed first page", ["index", "{examples}", "--db", "{zeroed_header}"], NOT_SQLITE),
    Row("a zeroed first page", ["mcp", "--db", "{zeroed_header}"], NOT_SQLITE),
    Row(
        "zeroed pages",
        ["search", "deploy", "--db", "{zeroed_pages}"],
        "hybridsql: {zeroed_pages} " + DAMAGED.format("{zeroed_pages}"),
    ),
    Row(
        "zeroed pages",
        ["index", "{examples}", "--db", "{zeroed_pages}"],
        "hybridsql: {zeroed_pages} " + DAMAGED.format("{zeroed_pages}"),
    ),
    Row(
        "a read-only file system: searching works",
        ["search", "deploy", "--db", "{ro}/index.db", "--json"],
        re.compile(r'^\{"query": "deploy", .*"results": \[\{"id"'),
        code=0,
        how="rofs",
    ),
    Row(
        "a read-only file system",
        ["index", "{examples}", "--db", "{ro}/index.db"],
        READ_ONLY.replace("{name}", "index.db"),
        how="rofs",
    ),
    Row(
        "a read-only file system",
        ["index", "{examples}", "--db", "{ro}/new.db"],
        READ_ONLY.replace("{name}", "new.db"),
        how="rofs",
    ),
    Row(
        "a read-only file system",
        ["memory", "add", "x", "--db", "{ro}/index.db"],
        READ_ONLY.replace("{name}", "index.db"),
        how="rofs",
    ),
    Row(
        "a full disk",
        ["index", "{examples}", "--db", "{full}/index.db"],
        "hybridsql: cannot write {full}/index.db: the disk is full; free some space and retry",
        how="full",
    ),
    # -- one limit: 10000 --------------------------------------------------------------------
    Row(
        "-n 10001",
        ["search", "deploy", "--db", "{index}", "-n", "10001"],
        LIMIT.format(name="limit", low=1, value=10001),
    ),
    Row(
        "--pool 10001",
        ["search", "deploy", "--db", "{index}", "--pool", "10001"],
        LIMIT.format(name="candidate_pool", low=1, value=10001),
    ),
    Row(
        "limit 10001",
        ["memory", "search", "deploy", "--db", "{index}", "--limit", "10001"],
        LIMIT.format(name="limit", low=1, value=10001),
        mcp=("index", "search_memory", {"query": "deploy", "limit": 10001}),
    ),
    Row(
        "limit 10001",
        ["memory", "documents", "deploy", "--db", "{index}", "--limit", "10001"],
        LIMIT.format(name="limit", low=1, value=10001),
    ),
    Row(
        "documents 10001",
        None,
        "hybridsql: documents must be from 0 to 10000, not 10001",
        mcp=("index", "search_memory", {"query": "deploy", "documents": 10001}),
    ),
    Row(
        "before 10001",
        ["memory", "timeline", "{memory}", "--before", "10001", "--db", "{index}"],
        LIMIT.format(name="before", low=0, value=10001),
        mcp=("index", "timeline", {"memory_id": "{memory}", "before": 10001}),
    ),
    # -- integers past 64 bits ---------------------------------------------------------------
    Row(
        "--keyword-terms 1e20",
        ["search", "deploy", "--db", "{index}", "--keyword-terms", "1e20"],
        "hybridsql search: Invalid value for '--keyword-terms': '1e20' is not a valid integer "
        "(see hybridsql search --help)",
        code=2,
    ),
    Row(
        "--keyword-terms 10**20",
        ["search", "deploy", "--db", "{index}", "--keyword-terms", str(10**20)],
        LIMIT.format(name="keyword_terms", low=0, value=10**20),
    ),
    Row(
        "a memory id of 2**64",
        ["memory", "get", str(2**64), "--db", "{index}"],
        f"hybridsql: no memory with id {2**64}",
    ),
    Row(
        "memory_id 2**63",
        ["memory", "reinforce", str(BIG), "--db", "{index}"],
        f"hybridsql: no memory with id {BIG}",
        mcp=("index", "reinforce", {"memory_id": BIG}),
    ),
    Row(
        "memory_id 2**63",
        ["memory", "timeline", str(BIG), "--db", "{index}"],
        f"hybridsql: no memory with id {BIG}",
        mcp=("index", "timeline", {"memory_id": BIG}),
    ),
    Row(
        "memory_id below -2**63",
        ["memory", "delete", "--db", "{index}", "--", str(-BIG - 1)],
        f"hybridsql: no memory with id {-BIG - 1}",
        mcp=("index", "delete", {"memory_id": -BIG - 1}),
    ),
    Row(
        "memory_id 2**63",
        ["memory", "supersede", str(BIG), "new text", "--db", "{index}"],
        f"hybridsql: no memory with id {BIG}",
        mcp=("index", "supersede", {"memory_id": BIG, "content": "new text"}),
    ),
    Row(
        "memory_id 2**63",
        ["memory", "relate", "{memory}", str(BIG), "--db", "{index}"],
        f"hybridsql: no memory with id {BIG}",
    ),
    Row(
        "before 2**63",
        ["memory", "timeline", "{memory}", "--before", str(BIG), "--db", "{index}"],
        LIMIT.format(name="before", low=0, value=BIG),
        mcp=("index", "timeline", {"memory_id": "{memory}", "before": BIG}),
    ),
    Row(
        "session_id 2**63",
        ["memory", "search", "deploy", "--session", str(BIG), "--db", "{index}"],
        f"hybridsql: no session with id {BIG}",
        mcp=("index", "search_memory", {"query": "deploy", "session_id": BIG}),
    ),
    Row(
        "session_id 2**63",
        ["memory", "session", "end", str(BIG), "--db", "{index}"],
        f"hybridsql: no session with id {BIG}",
    ),
    # -- the numpy backend with no vector to rank --------------------------------------------
    Row(
        "--backend numpy, no vector matches",
        ["search", "deploy", "--db", "{memories}", "--backend", "numpy", "--embedder", "local"],
        re.compile(
            r'^\{"query": "deploy", "mode": "hybrid", "backend": "numpy", .*"results": \[\]\}$'
        ),
        code=0,
    ),
    # -- a lone surrogate (an undecodable byte in argv); MCP's JSON cannot carry one ----------
    Row(
        "a lone surrogate in project",
        ["memory", "documents", "deploy", "--project", b"\xff", "--db", "{index}"],
        NO_RESULTS,
        code=0,
    ),
    # -- NaN and infinity --------------------------------------------------------------------
    Row(
        "--now nan",
        ["search", "deploy", "--db", "{index}", "--now", "nan"],
        FINITE.format(name="now", value="nan"),
    ),
    Row(
        "--now inf",
        ["search", "deploy", "--db", "{index}", "--now", "inf"],
        FINITE.format(name="now", value="inf"),
    ),
    Row(
        "--min-score nan",
        ["search", "deploy", "--db", "{index}", "--min-score", "nan"],
        FINITE.format(name="min_score", value="nan"),
    ),
    Row(
        "--vector-weight inf",
        ["search", "deploy", "--db", "{index}", "--vector-weight", "inf"],
        FINITE.format(name="vector_weight", value="inf"),
    ),
    Row(
        "--keyword-weight -inf",
        ["search", "deploy", "--db", "{index}", "--keyword-weight=-inf"],
        FINITE.format(name="keyword_weight", value="-inf"),
    ),
    Row(
        "--half-life inf",
        ["search", "deploy", "--db", "{index}", "--half-life", "inf"],
        FINITE.format(name="half_life_days", value="inf"),
    ),
    Row(
        "--vector-floor nan",
        ["search", "deploy", "--db", "{index}", "--vector-floor", "nan"],
        FINITE.format(name="vector_floor", value="nan"),
    ),
    Row(
        "--mmr-lambda nan",
        ["search", "deploy", "--db", "{index}", "--mmr", "--mmr-lambda", "nan"],
        FINITE.format(name="mmr_lambda", value="nan"),
    ),
    Row(
        "min_salience nan",
        ["memory", "search", "deploy", "--min-salience", "nan", "--db", "{index}"],
        "hybridsql: min_salience must be in [0, 1], not nan",
        mcp=("index", "search_memory", {"query": "deploy", "min_salience": float("nan")}),
    ),
    Row(
        "salience inf",
        ["memory", "add", "x", "--salience", "inf", "--db", "{index}"],
        "hybridsql: salience must be in [0, 1], not inf",
        mcp=("index", "add", {"content": "x", "salience": float("inf")}),
    ),
    Row(
        "amount nan",
        ["memory", "reinforce", "{memory}", "--amount", "nan", "--db", "{index}"],
        "hybridsql: amount must be in (0, 1], not nan",
        mcp=("index", "reinforce", {"memory_id": "{memory}", "amount": float("nan")}),
    ),
    # -- Ctrl-C, a closed pipe ---------------------------------------------------------------
    Row(
        "Ctrl-C while indexing",
        ["index", "{many}", "--db", "{scratch}/interrupted.db", "--embedder", "local"],
        "hybridsql: interrupted",
        code=130,
        how="sigint",
    ),
    Row(
        "output piped into a reader that went away",
        ["search", "deploy", "--db", "{index}", "--json"],
        "",
        code=141,
        how="closed",
    ),
    # -- long queries: answered up to a megabyte, each part of a search reading only what it needs
    Row(
        "a 100,000-character query (argv holds no more)",
        ["search", "postgres " * 11_000, "--db", "{index}", "--json"],
        re.compile(r'^\{"query": "postgres postgres .*"results": \[\{"id"'),
        code=0,
    ),
    Row(
        "a 100,000-character query (argv holds no more)",
        ["memory", "documents", "postgres " * 11_000, "--db", "{index}"],
        re.compile(r'"results": \[\{"id"'),
        code=0,
    ),
    Row(
        "a 600 KB query",
        None,
        re.compile(r'^\{\s*"memories": \[\],\s*"documents": \[\s*\{\s*"path"'),
        code=0,
        mcp=("index", "search_memory", {"query": "postgres " * 66_000}),
    ),
    Row(
        "a query over a megabyte",
        None,
        LONG.format(n="1,000,001"),
        mcp=("index", "search_memory", {"query": "x" * 1_000_001}),
    ),
    # -- --version ------------------------------------------------------------------------------
    Row(
        "--version",
        ["--version"],
        f"hybridsql {importlib.metadata.version('hybridsql')} (simd {SIMD})",
        0,
    ),
    # -- writes stay inside the memory folder ---------------------------------------------------
    Row(
        "memory/ is a link to another folder",
        [*EXTRACT, "--memory-dir", "{dir_link}"],
        LINK.format(today=TODAY, dir="{dir_link}", link="memory"),
        mcp=("dir_link", "extract_memory", {"topic": "t", "title": "T", "content": "c"}),
    ),
    Row(
        "today's note is a link to another file",
        [*EXTRACT, "--memory-dir", "{note_link}"],
        LINK.format(today=TODAY, dir="{note_link}", link=f"memory/{TODAY}.md"),
        mcp=("note_link", "extract_memory", {"topic": "t", "title": "T", "content": "c"}),
    ),
    # -- indexing while files come and go --------------------------------------------------------
    Row(
        "files deleted while the folder is indexed",
        ["index", "{churn}", "--db", "{scratch}/churn.db", "--embedder", "none"],
        re.compile(r'^\{"files_seen": \d+, '),
        code=0,
        how="churn",
    ),
    # -- escape sequences in indexed text, on a terminal and in JSON -----------------------------
    Row(
        "escape sequences in indexed text, on a terminal",
        ["search", "clearscreen", "--db", "{escapes}"],
        re.compile(r"clearscreen\x1b\[0m \\x1b\[2J\\x1b\]0;pwned\\x07 tab\there"),
        code=0,
        how="tty",
    ),
    Row(
        "escape sequences in a file name, in the progress bar",
        ["index", "{escape_folder}", "--db", "{scratch}/escapes.db", "--embedder", "none"],
        re.compile(r"name\\x1b\[31mred\.md"),
        code=0,
        how="tty",
    ),
    Row(
        "escape sequences in indexed text, in JSON (unchanged)",
        ["search", "clearscreen", "--db", "{escapes}", "--json"],
        re.compile(r"clearscreen \\u001b\[2J\\u001b\]0;pwned\\u0007 tab\\there"),
        code=0,
    ),
]


# -- the world every row runs in ------------------------------------------------------------


def zero_pages(path, pages):
    with open(path, "r+b") as f:
        f.seek(16)
        page_size = int.from_bytes(f.read(2), "big")
        page_size = 65536 if page_size == 1 else page_size
        for page in pages:
            f.seek((page - 1) * page_size)
            f.write(b"\0" * page_size)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Databases, folders and links, all under one folder whose files no row may change
    (``scratch`` and ``mcp`` excepted: the rows that write, write there)."""
    root = tmp_path_factory.mktemp("world")
    w = {"world": str(root), "examples": EXAMPLES, "today": TODAY}
    for name in ("scratch", "mcp", "outside", "folder", "ro", "full"):
        (root / name).mkdir()
        w[name] = str(root / name)
    w["index"] = index = str(root / "index.db")
    assert run_hybridsql("index", EXAMPLES, "--db", index, "--embedder", "none").returncode == 0
    added = run_hybridsql("memory", "add", "Deploys are frozen in December", "--db", index)
    w["memory"] = str(json.loads(added.stdout)["id"])
    w["memories"] = str(root / "memories.db")
    added = run_hybridsql("memory", "add", "A memory", "--db", w["memories"], "--embedder", "local")
    assert added.returncode == 0
    w["other"] = str(root / "other.db")
    with closing(sqlite3.connect(w["other"])) as other, other:
        other.execute("create table orders(id integer primary key, total real)")
        other.execute("insert into orders values (1, 9.5)")
    w["other_meta"] = str(root / "other-meta.db")
    with closing(sqlite3.connect(w["other_meta"])) as other, other:
        other.execute("create table meta(name, setting)")
    # "older": the newest schema a read-only open refuses (a search cannot upgrade it)
    for name, version in (("newer", SCHEMA_VERSION + 1), ("older", SEARCHABLE_FROM - 1)):
        w[name] = str(root / f"{name}.db")
        shutil.copy(index, w[name])
        with closing(sqlite3.connect(w[name])) as db, db:
            db.execute("update meta set value = ? where key = 'schema_version'", (version,))
    w["schema1"] = str(root / "schema1.db")
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "schema1.db.gz")
    with gzip.open(data) as src, open(w["schema1"], "wb") as dst:
        shutil.copyfileobj(src, dst)
    w["truncated"] = str(root / "truncated.db")
    shutil.copy(index, w["truncated"])
    os.truncate(w["truncated"], os.path.getsize(index) // 2)
    w["zeroed_header"] = str(root / "zeroed-header.db")
    shutil.copy(index, w["zeroed_header"])
    zero_pages(w["zeroed_header"], [1])
    w["zeroed_pages"] = str(root / "zeroed-pages.db")
    shutil.copy(index, w["zeroed_pages"])
    with closing(sqlite3.connect(index)) as db:
        roots = dict(db.execute("select name, rootpage from sqlite_schema"))
    zero_pages(w["zeroed_pages"], [roots["files"], roots["chunks"]])
    w["missing"] = str(root / "missing" / "x.db")
    w["nope"] = str(root / "nope.db")
    # Memory folders whose writes would leave them through a link.
    (root / "outside" / "target.md").write_text("# someone else's file\n")
    w["dir_link"] = str(root / "dir-link")
    (root / "dir-link").mkdir()
    os.symlink(root / "outside", root / "dir-link" / "memory")
    w["note_link"] = str(root / "note-link")
    (root / "note-link" / "memory").mkdir(parents=True)
    os.symlink(root / "outside" / "target.md", root / "note-link" / "memory" / f"{TODAY}.md")
    # Text and a file name with escape sequences: clear the screen, retitle the window.
    w["escape_folder"] = str(root / "escape-folder")
    (root / "escape-folder").mkdir()
    (root / "escape-folder" / "evil.md").write_text(
        "# Evil\n\nclearscreen \x1b[2J\x1b]0;pwned\x07 tab\there\n"
    )
    (root / "escape-folder" / "name\x1b[31mred.md").write_text("# fine\n")
    w["escapes"] = str(root / "escapes.db")
    indexed = run_hybridsql("index", w["escape_folder"], "--db", w["escapes"], "--embedder", "none")
    assert indexed.returncode == 0
    w["many"] = str(root / "many")
    (root / "many").mkdir()
    with open(os.path.join(EXAMPLES, "MEMORY.md")) as f:
        words = f.read().split()
    for i in range(400):
        text = " ".join(words[(i * 37 + j) % len(words)] for j in range(300))
        (root / "many" / f"note{i:03}.md").write_text(f"# note {i}\n\n{text}\n")
    w["churn"] = str(root / "scratch" / "churn")
    return w


def fill(value, w):
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.format(**w) if "{" in value else value
    if isinstance(value, dict):
        return {k: int(fill(v, w)) if v == "{memory}" else fill(v, w) for k, v in value.items()}
    return value  # numbers, and patterns (which name no path)


def snapshot(root):
    """Every file's bytes (as sha256), but the rows' own scratch folders. An empty -wal file
    (an index's, made by a reader) holds nothing; a -shm file is SQLite's shared memory."""
    seen = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("scratch", "mcp", "ro", "full")]
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith("-shm") or (name.endswith("-wal") and not os.path.getsize(path)):
                continue
            with open(path, "rb") as f:
                seen[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    for folder, dirs, _ in os.walk(root):  # links too, by where they point
        for name in dirs:
            if os.path.islink(os.path.join(folder, name)):
                seen[os.path.relpath(os.path.join(folder, name), root)] = os.readlink(
                    os.path.join(folder, name)
                )
    return seen


def read(path):
    with open(path, "rb") as f:
        return f.read()


def matches(expected, line):
    if isinstance(expected, re.Pattern):
        return expected.search(line) is not None
    return line == expected


# -- how rows run ---------------------------------------------------------------------------


DEADLINE = 240  # seconds: far more than any wait below takes on a loaded machine


def committed_files(db):
    """How many files the index holds now (0 while it cannot be read yet)."""
    try:
        conn = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.Error:
        return 0
    try:
        return conn.execute("select count(*) from files").fetchone()[0]
    except apsw.Error:
        return 0
    finally:
        conn.close()


def run_interrupted(argv, db):
    """Ctrl-C once the index holds a file: the embedding model is at work by then, with
    hundreds of notes still to embed (minutes of work: a run cannot end before the signal)."""
    with spawned(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        deadline = time.monotonic() + DEADLINE
        committed = 0
        while not committed and time.monotonic() < deadline and process.poll() is None:
            committed = committed_files(db)
            time.sleep(0.02)  # a poll interval, not a wait for something to happen
        assert committed, "the index committed no file in time"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=DEADLINE)
    conn = apsw.Connection(db)
    assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
    assert conn.execute("select count(*) from files").fetchone()[0] >= committed  # kept
    conn.close()
    return process.returncode, out, err


def test_ctrl_c_while_a_batch_is_embedded_keeps_the_files_written(tmp_path, embedding_server):
    """The interrupt at a known moment, whatever the load: the embedding server holds the
    second batch's request (64 notes of one chunk make the first) until the command has been
    interrupted; the first batch's files stay, whole, and the next run completes the rest."""
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(100):
        (folder / f"n{i:03}.md").write_text(
            f"# note {i}\n\nnotetoken{i} " + ("hold" if i == 90 else "")
        )
    embedding_server.hold = "notetoken90 hold"
    db = str(tmp_path / "index.db")
    argv = [HYBRIDSQL, "index", str(folder), "--db", db, "--embedder", "openai"]
    env = dict(
        os.environ,
        HYBRIDSQL_OPENAI_BASE_URL=embedding_server.base_url,
        HYBRIDSQL_OPENAI_MODEL="letters",
        OPENAI_API_KEY="",
    )
    with spawned(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    ) as process:
        try:
            assert embedding_server.holding.wait(DEADLINE), "the second batch was never asked for"
            assert committed_files(db) == 64
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=DEADLINE)
        finally:
            embedding_server.release.set()
    assert (process.returncode, out, err) == (130, "", "hybridsql: interrupted\n")
    conn = apsw.Connection(db)
    assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
    assert conn.execute("select path from files order by path").fetchall() == [
        (f"n{i:03}.md",) for i in range(64)
    ]
    conn.close()
    embedding_server.hold = None
    rerun = subprocess.run(
        argv, capture_output=True, text=True, env=env, timeout=DEADLINE, check=False
    )
    report = json.loads(rerun.stdout)
    assert (report["files_unchanged"], report["files_indexed"]) == (64, 36), rerun.stderr


def run_with_churn(argv, folder):
    """The command indexes ``folder`` while a thread deletes its files, the last ones first,
    a few milliseconds apart."""
    os.makedirs(folder, exist_ok=True)
    names = [f"n{i:04}.md" for i in range(400)]
    for name in names:
        with open(os.path.join(folder, name), "w") as f:
            f.write(f"# {name}\n\nchurntoken {name}\n")

    def delete():
        for name in reversed(names[100:]):
            os.remove(os.path.join(folder, name))
            time.sleep(0.003)

    deleter = threading.Thread(target=delete)
    with spawned(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        db = argv[argv.index("--db") + 1]
        deadline = time.monotonic() + DEADLINE
        while not os.path.exists(db) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)  # the command makes the index just before it walks the folder
        deleter.start()
        try:
            out, err = process.communicate(timeout=DEADLINE)
        finally:
            deleter.join()
    if process.returncode == 0:
        report = json.loads(out)
        assert {why for _, why in report["skipped"]} <= {VANISHED}
        done = report["files_indexed"] + report["files_unchanged"] + len(report["skipped"])
        assert done >= report["files_seen"]
    return process.returncode, out, err


MOUNT = {
    # a tmpfs holding a copy of the index, then made read-only
    "rofs": 'mount -t tmpfs tmpfs "$0" && cp "$1" "$0/index.db" && mount -o remount,ro "$0"',
    # a tmpfs too small for the examples' index
    "full": 'mount -t tmpfs -o size=256k tmpfs "$0"',
}


def can_mount(tmp):
    probe = subprocess.run(
        ["unshare", "--mount", "--map-root-user", "sh", "-c", 'mount -t tmpfs tmpfs "$0"', tmp],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def run_mounted(how, argv, w):
    """The command in a private mount namespace, after MOUNT[how] on the world's ro or full
    folder: nothing outside the namespace sees that file system."""
    if not can_mount(w["scratch"]):
        pytest.skip("cannot mount a tmpfs in a private namespace here (unshare is refused)")
    script = MOUNT[how] + ' && shift && exec "$@"'
    where = w["ro"] if how == "rofs" else w["full"]
    command = ["unshare", "--mount", "--map-root-user", "sh", "-c", script, where, w["index"]]
    out = subprocess.run(
        [*command, HYBRIDSQL, *argv], capture_output=True, text=True, timeout=300, check=False
    )
    return out.returncode, out.stdout, out.stderr


# -- the MCP side ---------------------------------------------------------------------------


class McpServer:
    """``hybridsql mcp`` on a copy of a database, and a JSON-RPC client over its stdio."""

    def __init__(self, db, memory_dir=None):
        args = [HYBRIDSQL, "mcp", "--db", db, "--embedder", "none"]
        args += ["--memory-dir", memory_dir] if memory_dir else []
        self.db = db
        self.stack = contextlib.ExitStack()
        self.process = self.stack.enter_context(
            spawned(
                args,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        self.answers, self.errors = Lines(self.process.stdout), Lines(self.process.stderr)
        self.next_id = 0
        answer = self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test_cli_errors", "version": "1"},
            },
        )
        assert "result" in answer, answer
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        # Python's json writes NaN and Infinity, which the server's parser reads.
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def request(self, method, params):
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            line = self.answers.next(DEADLINE)
            assert line, f"the server exited: {self.errors.rest(DEADLINE)}"
            answer = json.loads(line)
            if answer.get("id") == self.next_id:
                return answer

    def call(self, tool, arguments):
        """(is_error, text) of a tool call."""
        result = self.request("tools/call", {"name": tool, "arguments": arguments})["result"]
        return result.get("isError", False), result["content"][0]["text"]

    def state(self):
        """What the tools could change: memories, their salience, links, sessions, chunks."""
        conn = apsw.Connection(self.db, flags=apsw.SQLITE_OPEN_READONLY)
        try:
            return conn.execute(
                "select (select count(*) || ' ' || total(salience) from memories),"
                " (select count(*) from session_memories), (select count(*) from sessions),"
                " (select count(*) from chunks), (select count(*) from memory_links),"
                " (select count(*) from files)"
            ).fetchone()
        finally:
            conn.close()

    def close(self):
        try:
            self.process.stdin.close()
            self.process.wait(timeout=DEADLINE)
        finally:
            self.stack.close()


@pytest.fixture(scope="module")
def servers(world):
    """One MCP server per kind of world a row needs, started when first asked for."""
    started = {}

    def get(name):
        if name not in started:
            db = os.path.join(world["mcp"], f"{name}.db")
            shutil.copy(world["index"], db)
            started[name] = McpServer(db, None if name == "index" else world[name])
        return started[name]

    yield get
    for server in started.values():
        server.close()


# -- the table ------------------------------------------------------------------------------


@pytest.mark.parametrize("row", [r for r in ROWS if r.argv], ids=lambda r: r.what)
def test_cli(row, world):
    argv = [fill(a, world) for a in row.argv]
    line = fill(row.line, world)
    before = snapshot(world["world"])
    if row.how == "tty":
        code, out = run_on_tty([HYBRIDSQL, *argv])
        assert code == row.code, out
        assert matches(line, out), out
        # No control character reaches the terminal but line ends, the bold marks and the
        # progress bar's hiding and showing of the cursor.
        ours = re.sub(r"\x1b\[([01]m|\?25[lh])", "", out)
        assert not re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", ours)
    else:
        if row.how == "sigint":
            code, out, err = run_interrupted([HYBRIDSQL, *argv], argv[3])
        elif row.how == "churn":
            code, out, err = run_with_churn([HYBRIDSQL, *argv], world["churn"])
        elif row.how == "closed":
            with spawned(
                [HYBRIDSQL, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            ) as process:
                process.stdout.close()  # before the command can write a byte
                _, err = process.communicate(timeout=DEADLINE)
                code, out = process.returncode, ""
        elif row.how in MOUNT:
            code, out, err = run_mounted(row.how, argv, world)
        else:
            out = run_hybridsql(*argv)
            code, out, err = out.returncode, out.stdout, out.stderr
        assert code == row.code, (out, err)
        if row.code == 0:
            assert err == "" and out.count("\n") == 1 and matches(line, out.rstrip("\n")), err
        elif row.how == "closed":
            assert (out, err) == ("", "")
        else:
            assert out == "" and err.count("\n") == 1 and matches(line, err.rstrip("\n")), err
    assert snapshot(world["world"]) == before


@pytest.mark.parametrize("row", [r for r in ROWS if r.mcp], ids=lambda r: r.what)
def test_mcp(row, world, servers):
    name, tool, arguments = row.mcp
    server = servers(name)
    message = fill(row.line, world)
    message = message if isinstance(message, re.Pattern) else message.removeprefix("hybridsql: ")
    before_files, before = snapshot(world["world"]), server.state()
    is_error, text = server.call(tool, fill(arguments, world))
    if row.code == 0:
        assert not is_error and matches(message, text), text[:500]
    else:
        assert is_error and text == f"Error executing tool {tool}: {message}"
    assert server.state() == before
    assert snapshot(world["world"]) == before_files


# -- beyond one line ------------------------------------------------------------------------


def test_a_damaged_database_stops_the_mcp_server_writing(tmp_path, world):
    """Pages of chunks zeroed: start-up (schema, session) works, the first search finds the
    damage; from then on every tool says so, and nothing more is written, not even the
    session's summary or the checkpoint of the -wal file at exit."""
    db = str(tmp_path / "damaged.db")
    shutil.copy(world["index"], db)
    with closing(sqlite3.connect(db)) as conn:
        root = conn.execute("select rootpage from sqlite_schema where name = 'chunks'").fetchone()[
            0
        ]
    zero_pages(db, [root])
    server = McpServer(db)
    message = f"{db} " + DAMAGED.format(db)
    assert server.call("search_memory", {"query": "deploy"}) == (
        True,
        f"Error executing tool search_memory: {message}",
    )
    files = {p: read(p) for p in (db, db + "-wal")}
    assert server.call("add", {"content": "a new memory"}) == (
        True,
        f"Error executing tool add: {message}",
    )
    server.close()
    assert server.process.returncode == 0
    assert {p: read(p) for p in (db, db + "-wal")} == files


def test_the_sdk_client_sees_the_same_lines(tmp_path, world):
    """The table's MCP rows speak JSON-RPC themselves; the SDK's own client gets the same."""
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    db = str(tmp_path / "sdk.db")
    shutil.copy(world["index"], db)
    params = StdioServerParameters(
        command=HYBRIDSQL,
        args=["mcp", "--db", db, "--embedder", "none"],
        env=dict(os.environ),  # all of it: the SDK passes a short list (no LD_PRELOAD) otherwise
    )

    async def main():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            limit = await session.call_tool("search_memory", {"query": "q", "limit": 10001})
            big = await session.call_tool("timeline", {"memory_id": BIG})
            return [(r.is_error, r.content[0].text) for r in (limit, big)]

    assert anyio.run(main) == [
        (
            True,
            "Error executing tool search_memory: limit must be an integer from 1 to 10000, not 10001",
        ),
        (True, f"Error executing tool timeline: no memory with id {BIG}"),
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"limit": 2.5}, "limit must be an integer from 1 to 10000, not 2.5"),
        ({"keyword_terms": True}, "keyword_terms must be an integer from 0 to 10000, not True"),
        (
            {"candidate_pool": 2**63},
            f"candidate_pool must be an integer from 1 to 10000, not {BIG}",
        ),
        ({"min_score": "0.1"}, "min_score must be a finite number, not '0.1'"),
        ({"saturation": float("nan")}, "saturation must be a finite number, not nan"),
    ],
)
def test_the_rows_checks_from_python(options, message):
    """What the command line cannot send (it parses numbers first), Python can."""
    with pytest.raises(QueryError, match=re.escape(message)):
        SearchOptions(**options).check()


# -- every command on every damaged or foreign file -----------------------------------------

# Every command that takes --db (docs/cli.md), as it runs on the file named {db}.
COMMANDS = {
    "index": ["index", "{notes}"],
    "search": ["search", "deploys frozen"],
    "stats": ["stats"],
    "memory add": ["memory", "add", "Deploys resume in January"],
    "memory search": ["memory", "search", "deploys frozen"],
    "memory documents": ["memory", "documents", "deploys frozen"],
    "memory get": ["memory", "get", "{memory}"],
    "memory recent": ["memory", "recent"],
    "memory supersede": ["memory", "supersede", "{memory}", "Deploys resume in January"],
    "memory reinforce": ["memory", "reinforce", "{memory}"],
    "memory relate": ["memory", "relate", "{memory}", "{memory}"],
    "memory timeline": ["memory", "timeline", "{memory}"],
    "memory delete": ["memory", "delete", "{memory}"],
    "memory extract": ["memory", "extract", "--topic", "t", "--title", "T", "--content", "c"],
    "memory session start": ["memory", "session", "start"],
    "memory session end": ["memory", "session", "end", "1", "--summary", "s"],
    "memory session context": ["memory", "session", "context", "{memory}"],
    "mcp": ["mcp"],
    "replicate": ["replicate", "--to", "{replica}", "--once"],
    "restore": ["restore", "--from", "{replica}"],
}
# A file that is not an index this version can use at all: every command refuses it.
UNUSABLE = {
    "not SQLite": lambda db: _write(db, "name,total\nAda,9.5\n" * 500),
    "another program's database": lambda db: _sql(
        db, "create table orders(id integer primary key, total real)"
    ),
    "an empty database another program claimed": lambda db: _sql(
        db, "pragma application_id = 1234", "pragma user_version = 9"
    ),
    "an index of a newer schema": lambda db: _sql(
        db, f"update meta set value = {SCHEMA_VERSION + 1} where key = 'schema_version'"
    ),
    "a truncated index": lambda db: os.truncate(db, os.path.getsize(db) // 2),
    "a zeroed header": lambda db: zero_pages(db, [1]),
}
# An index damaged or written by a newer version in one part: a command that needs that part
# fails in one line; one that does not may succeed.
DAMAGED_PARTS = {
    "a newer vector storage format": ["update vectors_info set value = 99 where key = 'format'"],
    "vectors of another dimension": ["update vectors_blocks set dims = dims + 1"],
    "the vectors' layout lost": ["delete from vectors_info where key = 'format'"],
    "a vector block over its room": ["update vectors_blocks set count = 999"],
    "a vector codes row cut short": ["update vectors_codes set data = x'00'"],
    "a vector codes table lost": ["drop table vectors_codes"],
    "a vector row in a block that is missing": ["update vectors_rowids set block = 77"],
    "the keyword index's sizes lost": ["delete from chunks_fts_docsize"],
    "the chunks table's pages zeroed": [],
}


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _sql(db, *statements):
    with closing(sqlite3.connect(db)) as conn, conn:
        for statement in statements:
            conn.execute(statement)


@pytest.fixture(scope="module")
def damaged_files(tmp_path_factory):
    """An index with documents and a memory embedded by the local model, and each damaged or
    foreign file made from it (or beside it), by name."""
    root = tmp_path_factory.mktemp("damaged")
    notes = root / "notes"
    notes.mkdir()
    (notes / "deploys.md").write_text("# Deploys\n\nDeploys are frozen in December.\n")
    index = str(root / "index.db")
    indexed = run_hybridsql("index", str(notes), "--db", index, "--embedder", "local")
    assert indexed.returncode == 0, indexed.stderr
    added = run_hybridsql(
        "memory", "add", "Deploys are frozen", "--db", index, "--embedder", "local"
    )
    assert added.returncode == 0, added.stderr
    files = {}
    for name, damage in {**UNUSABLE, **DAMAGED_PARTS}.items():
        path = str(root / f"{len(files)}.db")
        if name == "not SQLite" or "claimed" in name or "another program" in name:
            open(path, "wb").close()
        else:
            shutil.copy(index, path)
        if name == "the chunks table's pages zeroed":
            with closing(sqlite3.connect(index)) as db:
                zero_pages(
                    path,
                    [
                        db.execute(
                            "select rootpage from sqlite_schema where name = 'chunks'"
                        ).fetchone()[0]
                    ],
                )
        elif callable(damage):
            damage(path)
        else:
            _sql(path, *damage)
        files[name] = path
    return {"files": files, "notes": str(notes), "memory": str(json.loads(added.stdout)["id"])}


# What a file that no version of hybridsql would refuse may still be read by: stats reads any
# schema version's bytes by table.
READS_ANY_SCHEMA = {("an index of a newer schema", "stats")}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("damage", [*UNUSABLE, *DAMAGED_PARTS])
def test_every_command_on_a_damaged_or_foreign_file_answers_in_one_line(
    command, damage, damaged_files, tmp_path, capsys, monkeypatch
):
    """In this process (main(), as the installed command runs it) but for mcp, which serves
    its stdin: an exception main() lets out is the traceback the command would print."""
    db = str(tmp_path / "index.db")
    shutil.copy(damaged_files["files"][damage], db)
    names = {**damaged_files, "replica": str(tmp_path / "replica")}
    argv = [a.format(**names) for a in COMMANDS[command]] + ["--db", db]
    if command == "memory extract":
        (tmp_path / "memory-dir").mkdir()
        argv += ["--memory-dir", str(tmp_path / "memory-dir")]
    monkeypatch.setenv("HYBRIDSQL_EMBEDDER", "local")
    if command == "mcp":
        ran = subprocess.run(
            [HYBRIDSQL, *argv],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        code, out, err = ran.returncode, ran.stdout, ran.stderr
    else:
        code = main(argv)
        out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    if code == 0:
        assert damage in DAMAGED_PARTS or (damage, command) in READS_ANY_SCHEMA
        assert command == "replicate" or err == "", err  # Litestream logs what it did
    else:
        assert out == "", out
        assert err.count("\n") == 1 and err.startswith("hybridsql: "), err


NEWER_STORAGE = (
    "{db} was made by a newer hybridsql (its vectors' storage format 99, this one reads 3);"
    " upgrade hybridsql to use it"
)
OTHER_DIMENSION = (
    "{db} holds vectors of 385 dimensions where its model gives 384: the model changed under the"
    " same name, or the file is damaged; index into a new file, or restore it from a backup"
)
# A block whose dims disagree with its codes row is damage (its records are another length): a
# search reads the block and says so; an insert meets only the partition's dims.
DAMAGED_BLOCK = (
    "{db} is damaged (vectors: block {block} is damaged: its codes row has 6400 bytes, not"
    " 6528); restore it from a backup or recover it with `sqlite3 {db} .recover`"
)


@pytest.mark.parametrize(
    ("damage", "command", "line"),
    [
        ("a newer vector storage format", "search", NEWER_STORAGE),
        ("a newer vector storage format", "memory search", NEWER_STORAGE),
        ("a newer vector storage format", "memory add", NEWER_STORAGE),
        ("vectors of another dimension", "search", DAMAGED_BLOCK.replace("{block}", "1")),
        ("vectors of another dimension", "memory search", DAMAGED_BLOCK.replace("{block}", "2")),
        ("vectors of another dimension", "memory add", OTHER_DIMENSION),
    ],
)
def test_the_line_names_what_is_wrong(command, damage, line, damaged_files, tmp_path, capsys):
    db = str(tmp_path / "index.db")
    shutil.copy(damaged_files["files"][damage], db)
    argv = [a.format(**damaged_files) for a in COMMANDS[command]]
    assert main([*argv, "--db", db, "--embedder", "local"]) == 1
    assert capsys.readouterr() == ("", f"hybridsql: {line.format(db=db)}\n")
