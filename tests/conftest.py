"""Shared fixtures: fresh databases with hybridsql loaded, a memory folder from examples/, and
the SciFact records vendored in tests/data/scifact."""

import gzip
import json
import os
import shutil
import sys
from itertools import islice

import apsw
import pytest

import hybridsql

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples", "memory")
SCIFACT = os.path.join(ROOT, "tests", "data", "scifact")
# The installed command. Not `python -m hybridsql`: from the checkout, that would import the
# source tree (uncompiled in a clean clone) instead of the installed package.
HYBRIDSQL = os.path.join(os.path.dirname(sys.executable), "hybridsql")


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
    from hybridsql.index import HybridIndex

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
