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
from conftest import EXAMPLES, check_fts, run_hybridsql

import hybridsql
from hybridsql import schema
from hybridsql.index import HybridIndex

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


def test_without_the_extension_the_plugin_names_what_is_missing_and_where_to_get_it(example_db):
    """sqlite-utils on Python's own sqlite3, where it cannot load extensions (pyenv's builds):
    the functions are Python's, vector_index tables are missing, and the warning says where to
    get them."""
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        pytest.skip("this Python's sqlite3 loads the extension: nothing is missing")
    cli = (
        "import sys; sys.modules['pysqlite3'] = sys.modules['sqlean'] = None;"
        " from sqlite_utils.cli import cli; cli()"
    )

    def query(sql):
        command = [sys.executable, "-c", cli, "query", example_db, sql]
        return subprocess.run(command, capture_output=True, text=True, check=False)

    out = query("select round(hybrid_score(0.8, -4.2), 6) as s")
    assert json.loads(out.stdout) == [{"s": 0.648732}]
    assert "`pip install pysqlite3-binary` gives sqlite-utils and Datasette" in out.stderr
    out = query("select count(*) from vectors")
    assert out.returncode != 0 and "no such module: vector_index" in out.stdout + out.stderr
    assert "the vector_index tables (an index's vectors) and bm25_candidate() are" in out.stderr


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
    assert len(triggers) == 6
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
        f"hybridsql: {path} is missing chunks_delete, memories_delete, chunks_fts_insert,"
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
            "name like 'vectors\\_%' escape '\\' or name glob '*_fts_*' or name glob '*_trigram_*'"
        )
        parts = conn.execute(
            f"select name from sqlite_schema where type in ('table', 'view', 'trigger')"
            f" and not ({shadow}) or type = 'trigger'"
        ).fetchall()
    assert columns == schema.COLUMNS
    assert sorted(n for (n,) in parts) == sorted(schema.PARTS + schema.FTS_PARTS)
