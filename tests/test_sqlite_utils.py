"""sqlite-utils' own commands on an index: its full-text search finds chunks_fts."""

import json
import os
import sqlite3
import subprocess
import sys

import pytest

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
