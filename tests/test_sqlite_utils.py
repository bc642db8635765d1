"""sqlite-utils' own commands on an index: its full-text search finds chunks_fts."""

import json
import os
import subprocess
import sys

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
