"""sqlite-utils' own commands on an index: its full-text search finds chunks_fts."""

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing

import pytest
from conftest import (
    EXAMPLES,
    PYTHON_ONLY_LINE,
    STDLIB_LOADS_EXTENSIONS,
    WITHOUT_PYSQLITE3,
    check_fts,
    run_hybridsql,
)
from sqlite_utils.utils import sqlite3 as sqlite_utils_sqlite3

import hybridsql
from hybridsql.db import schema
from hybridsql.indexing.index import HybridIndex

SQLITE_UTILS = os.path.join(os.path.dirname(sys.executable), "sqlite-utils")


def sqlite_utils(*args) -> str:
    out = subprocess.run([SQLITE_UTILS, *args], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_sqlite_utils_search_finds_the_documents_by_their_words(example_db):
    rows = json.loads(sqlite_utils("search", example_db, "chunks", "deploy", "-c", "path"))
    paths = [r["path"] for r in rows]
    assert "notes/deploy-runbook.md" in paths and len(paths) >= 5
    sql = "select path from chunks where text like '%deploy%' and kind = 'document'"
    assert set(paths) <= {r["path"] for r in json.loads(sqlite_utils("query", example_db, sql))}
    assert 'join "chunks_fts"' in sqlite_utils("search", example_db, "chunks", "x", "--sql")


# The k nearest neighbours of chunk 5, through the index's vector_index table.
NEAREST = (
    "select chunk_id, round(score, 6) as score from vectors"
    " where vector match (select vector from vectors where chunk_id = 5) and k = 3"
)


def run_sqlite_utils(*args, **env) -> subprocess.CompletedProcess:
    """The installed ``sqlite-utils`` command, ``env`` added to the environment."""
    return subprocess.run(
        [SQLITE_UTILS, *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_on_a_sqlite3_that_loads_extensions_the_vector_index_answers_and_nothing_is_said(
    example_db,
):
    """What `pip install "hybridsql[sqlite-utils]"` gives: pysqlite3 where it has a wheel, which
    sqlite-utils uses in place of Python's sqlite3. The k-nearest query answers as apsw does, and
    stderr stays empty."""
    if not hasattr(sqlite_utils_sqlite3.Connection, "enable_load_extension"):
        pytest.skip(
            "sqlite-utils runs on a sqlite3 that cannot load extensions: pysqlite3 has no wheel"
            " for this platform (docs/platforms.md)"
        )
    out = run_sqlite_utils("query", example_db, NEAREST)
    assert (out.returncode, out.stderr) == (0, "")
    conn = hybridsql.connect(example_db, readonly=True)
    want = [{"chunk_id": i, "score": s} for i, s in conn.execute(NEAREST)]
    assert json.loads(out.stdout) == want and len(want) == 3


def test_on_pythons_own_sqlite3_that_cannot_load_extensions_one_line_says_why(example_db):
    """Where pysqlite3 is not installed and Python's sqlite3 cannot load extensions (pyenv's
    builds): the functions answer in Python, and hybridsql says why in exactly one line on
    stderr, attributed to it; a query of the vector_index table then fails with SQLite's error."""
    if STDLIB_LOADS_EXTENSIONS:
        pytest.skip("this Python's own sqlite3 loads extensions: nothing falls back")
    out = run_sqlite_utils(
        "query", example_db, "select round(hybrid_score(0.8, -4.2), 6) as s", **WITHOUT_PYSQLITE3
    )
    assert json.loads(out.stdout) == [{"s": 0.648732}]
    assert (out.returncode, out.stderr) == (0, PYTHON_ONLY_LINE + "\n")
    out = run_sqlite_utils("query", example_db, NEAREST, **WITHOUT_PYSQLITE3)
    assert out.returncode == 1
    assert out.stderr.splitlines() == [PYTHON_ONLY_LINE, "Error: no such module: vector_index"]


SEVERAL_CONNECTIONS = """
import sys, threading, sqlite_utils
def query():
    db = sqlite_utils.Database(sys.argv[1])
    assert db.execute("select bm25_score(-4.2, 1)").fetchone()[0] == 4.2 / 5.2
query()  # first alone: sqlite-utils loads its plugins on the first connection, not thread-safely
threads = [threading.Thread(target=query) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(sqlite_utils.utils.sqlite3.__name__)
"""


def python_without_pysqlite3(script: str, db: str, tmp_path):
    """Runs ``script`` with ``db`` as its argument in a new Python that cannot import pysqlite3,
    from ``tmp_path``: not the checkout, whose hybridsql/ is the uncompiled source."""
    return subprocess.run(
        [sys.executable, "-c", script, db],
        env={**os.environ, **WITHOUT_PYSQLITE3},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_line_is_said_once_per_process_however_many_connections(example_db, tmp_path):
    if STDLIB_LOADS_EXTENSIONS:
        pytest.skip("this Python's own sqlite3 loads extensions: nothing falls back")
    out = python_without_pysqlite3(SEVERAL_CONNECTIONS, example_db, tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (0, "sqlite3\n", PYTHON_ONLY_LINE + "\n")


def test_apsw_has_everything_where_pythons_sqlite3_cannot_load_extensions(example_db, tmp_path):
    """apsw brings its own SQLite: the hybridsql command's search, and the vector_index table
    through apsw, work on a Python whose sqlite3 cannot load extensions, and say nothing."""
    if STDLIB_LOADS_EXTENSIONS:
        pytest.skip("this Python's own sqlite3 loads extensions: nothing to show")
    out = run_hybridsql(
        "search", "deploy freeze", "--db", example_db, "--json", **WITHOUT_PYSQLITE3
    )
    assert (out.returncode, out.stderr) == (0, "")
    assert json.loads(out.stdout)["results"][0]["path"] == "notes/deploy-runbook.md"
    script = (
        "import sys, hybridsql; c = hybridsql.connect(sys.argv[1], readonly=True);"
        f" print(hybridsql.backend_of(c), [r[0] for r in c.execute({NEAREST!r})])"
    )
    out = python_without_pysqlite3(script, example_db, tmp_path)
    assert (out.returncode, out.stderr) == (0, "")
    backend, ids = out.stdout.split(" ", 1)
    assert backend == "extension" and json.loads(ids)[0] == 5 and len(json.loads(ids)) == 3


# -- a table rebuilt by sqlite-utils (transform) ----------------------------------------------


def schema_of(path, kind):
    with closing(sqlite3.connect(path)) as conn:
        sql = "select name, sql from sqlite_schema where type = ? order by name"
        return conn.execute(sql, (kind,)).fetchall()


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture
def index_copy(example_db, tmp_path):
    path = str(tmp_path / "mem.db")
    shutil.copy(example_db, path)
    return path


def test_a_transformed_chunks_table_gets_its_triggers_back_and_its_indexes_in_step(index_copy):
    """`sqlite-utils transform` rebuilds chunks and drops the triggers on it; what is written
    meanwhile leaves the keyword index and the vectors out of step. A read-only open says so;
    the next writing open makes the triggers again and brings both back in step."""
    path = index_copy
    triggers = schema_of(path, "trigger")
    assert len(triggers) == 9
    sqlite_utils("transform", path, "chunks")
    assert [name for name, _ in schema_of(path, "trigger")] == ["files_delete"]
    # Written while the triggers are gone: a file's chunks deleted, a chunk added, one changed.
    sqlite_utils("query", path, "delete from chunks where path = 'notes/deploy-runbook.md'")
    sqlite_utils(
        "query",
        path,
        "insert into chunks(kind, file_id, path, text, created_at) select 'document', id, path,"
        " 'the zebrafinch migration plan', 0 from files where path = 'MEMORY.md'",
    )
    sqlite_utils(
        "query",
        path,
        "update chunks set text = 'quokka sightings' where id = (select min(id) from chunks"
        " where path = 'notes/architecture.md')",
    )
    before = digest(path)
    out = run_hybridsql("search", "deploy", "--db", path, "--embedder", "none")
    assert (out.returncode, out.stdout, out.stderr) == (
        1,
        "",
        f"hybridsql: {path} is missing chunk_keys_insert, chunk_keys_delete, chunk_keys_update,"
        " chunks_delete, memories_delete, chunks_fts_insert,"
        " chunks_fts_delete, chunks_fts_update (a table rebuilt by another tool, such as"
        " `sqlite-utils transform`, loses its triggers); open it once for writing to make them"
        f" again, with `hybridsql index DIR --db {path}` or any `hybridsql memory` command that"
        " writes\n",
    )
    assert digest(path) == before

    HybridIndex(path, embedder="none").close()
    assert schema_of(path, "trigger") == triggers
    conn = hybridsql.connect(path)  # FTS5's integrity-check is an insert
    try:
        check_fts(conn)
        orphans = "select count(*) from vectors where chunk_id not in (select id from chunks)"
        assert conn.execute(orphans).fetchone()[0] == 0
        keys = (
            "select count(*) from chunks c join chunk_keys k on k.chunk_id = c.id"
            " and k.length = length(c.text) and k.tail = substr(c.text, -24)"
        )
        count = "select (select count(*) from chunks), (select count(*) from chunk_keys)"
        assert conn.execute(count).fetchone() == (conn.execute(keys).fetchone()[0],) * 2
    finally:
        conn.close()
    with HybridIndex(path, embedder="none", readonly=True) as idx:
        assert "notes/deploy-runbook.md" not in {r.path for r in idx.search("deploy")}
        assert [r.path for r in idx.search("zebrafinch")] == ["MEMORY.md"]
        assert [r.path for r in idx.search("quokka")] == ["notes/architecture.md"]


def test_a_renamed_column_is_named_in_one_line_and_nothing_is_written(index_copy):
    path = index_copy
    sqlite_utils("transform", path, "chunks", "--rename", "heading", "title")
    before = digest(path)
    line = (
        f"hybridsql: {path}: the table chunks has no column heading (renamed to title?); rename"
        f" it back with `sqlite-utils transform {path} chunks --rename title heading`\n"
    )
    for argv in (["search", "deploy"], ["memory", "add", "a memory"], ["index", EXAMPLES]):
        out = run_hybridsql(*argv, "--db", path, "--embedder", "none")
        assert (out.returncode, out.stdout, out.stderr) == (1, "", line)
        assert digest(path) == before
    sqlite_utils("transform", path, "chunks", "--rename", "title", "heading")
    with HybridIndex(path, embedder="none") as idx:  # renamed back: repaired, and searched
        assert idx.search("deploy")


def test_what_every_open_checks_is_what_a_new_index_holds(tmp_path):
    """schema.COLUMNS and schema.PARTS (+ FTS_PARTS) against an index made afresh: a column or
    trigger added to the schema is checked from then on."""
    path = str(tmp_path / "new.db")
    HybridIndex(path, embedder="none").close()
    with closing(sqlite3.connect(path)) as conn:
        columns = {
            table: tuple(
                c for (c,) in conn.execute(f"select name from pragma_table_info('{table}')")
            )
            for table in schema.COLUMNS
        }
        shadow = (
            "name like 'vectors\\_%' escape '\\' or name glob '*_fts_*'"
            " or name glob 'chunks_trigram_*' or name glob 'memories_trigram_*'"
        )
        parts = conn.execute(
            f"select name from sqlite_schema where type in ('table', 'view', 'trigger')"
            f" and not ({shadow}) or type = 'trigger'"
        ).fetchall()
    assert columns == schema.COLUMNS
    assert sorted(n for (n,) in parts) == sorted(schema.PARTS + schema.FTS_PARTS)
