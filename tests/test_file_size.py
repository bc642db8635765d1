"""The file's size: the embedding cache keeps no second copy of a vector the index holds, an
index of schema 3 (which kept them twice) upgrades without embedding anything again, and
`hybridsql stats` breaks a file down by table."""

import json
import os
import re

import apsw
import numpy as np
import pytest
from conftest import letter_counts, run_hybridsql

from hybridsql.db import stats
from hybridsql.db.extension import connect
from hybridsql.db.schema import SCHEMA_VERSION, schema_version
from hybridsql.indexing.index import HybridIndex


class Letters:
    """A provider whose vector is a text's letter counts; records every text it is asked for."""

    model_id, dims = "letters", 26

    def __init__(self, revision=None):
        self.asked = []
        if revision:
            self.revision = revision

    def embed(self, texts):
        self.asked += texts
        return np.array([letter_counts(t) for t in texts], dtype=np.float32)


def chunk_texts(conn):
    return {t for (t,) in conn.execute("select text from chunks")}


def cached_in_index(conn):
    """The cache rows whose vector the index holds for a chunk of the same text."""
    return conn.execute(
        "select count(*) from embedding_cache e join chunks c on length(c.text) = e.text_length"
        " and substr(c.text, -24) = e.text_tail join vectors v on v.chunk_id = c.id"
        " where v.vector = e.vector"
    ).fetchone()[0]


def edit(folder):
    """Appends a paragraph to one file: its other chunks keep their texts."""
    with open(os.path.join(folder, "MEMORY.md"), "a", encoding="utf-8") as f:
        f.write("\n\n## Added later\n\nThe staging cluster moved to eu-west-3 in November.\n")


def test_the_cache_keeps_no_copy_of_the_index_and_an_edit_embeds_only_new_texts(
    tmp_path, memory_dir
):
    db = str(tmp_path / "mem.db")
    first = Letters()
    with HybridIndex(db, embedder=first) as idx:
        idx.index_folder(str(memory_dir))
        before = chunk_texts(idx.conn)
    assert sorted(first.asked) == sorted(before)
    with HybridIndex(db, embedder=Letters()) as idx:  # closing pruned what the run left
        assert idx.conn.execute("select count(*) from embedding_cache").fetchone()[0] == 0
        meta = "select value from meta where key = 'vectors letters'"
        assert idx.conn.execute(meta).fetchone() == ("letters",)
    edit(memory_dir)
    again = Letters()
    with HybridIndex(db, embedder=again) as idx:
        idx.index_folder(str(memory_dir))
        after = chunk_texts(idx.conn)
        assert sorted(again.asked) == sorted(after - before) and again.asked
        # The file's old chunks went into the cache as it was written again: the copies of
        # those written again leave it at the next call.
        assert cached_in_index(idx.conn) > 0
        idx.embedder.embed(["a query"])
        assert cached_in_index(idx.conn) == 0
    with HybridIndex(db, embedder=Letters()) as idx:
        idx.embedder.embed(["a query"])
        assert cached_in_index(idx.conn) == 0


def test_a_deleted_files_vectors_wait_in_the_cache_for_it_to_come_back(tmp_path, memory_dir):
    db = str(tmp_path / "mem.db")
    with HybridIndex(db, embedder=Letters()) as idx:
        idx.index_folder(str(memory_dir))
    moved = tmp_path / "elsewhere"
    os.rename(memory_dir / "notes", moved)
    provider = Letters()
    with HybridIndex(db, embedder=provider) as idx:
        idx.index_folder(str(memory_dir))
        kept = idx.conn.execute("select count(*) from embedding_cache").fetchone()[0]
        assert kept > 0 and cached_in_index(idx.conn) == 0
        os.rename(moved, memory_dir / "notes")
        idx.index_folder(str(memory_dir))
        idx.embedder.embed(["a query"])
        assert idx.conn.execute("select count(*) from embedding_cache").fetchone()[0] == 1
    assert provider.asked == ["a query"]


def test_a_querys_vector_stays_in_the_cache(tmp_path, memory_dir):
    db = str(tmp_path / "mem.db")
    with HybridIndex(db, embedder=Letters()) as idx:
        idx.index_folder(str(memory_dir))
        idx.search("where does staging run?")
    provider = Letters()
    with HybridIndex(db, embedder=provider) as idx:
        assert idx.conn.execute("select count(*) from embedding_cache").fetchone()[0] == 1
        idx.search("where does staging run?")
    assert provider.asked == []


def test_a_busy_file_leaves_the_cache_unpruned_instead_of_failing_a_search(tmp_path, memory_dir):
    """Pruning is housekeeping: while another process holds the write lock, an embedding whose
    prune is due answers (the rows stay, as a cache), a search with nothing to prune takes no
    write lock at all, and the rows leave at a later call once the lock is free."""
    db = str(tmp_path / "mem.db")
    with HybridIndex(db, embedder=Letters()) as idx:
        idx.index_folder(str(memory_dir))
        idx.search("where does staging run?")  # its vector cached: the search below embeds none
    edit(memory_dir)
    with HybridIndex(db, embedder=Letters()) as idx:
        idx.index_folder(str(memory_dir))
        left = cached_in_index(idx.conn)
        assert left > 0  # the edited file's old chunks, pruned at the next call
        idx.conn.set_busy_timeout(50)
        other = connect(db)
        other.execute("begin immediate")
        try:
            idx.embedder.embed(["where does staging run?"])  # a prune due, and the file busy
            assert cached_in_index(idx.conn) == left
            assert idx.search("where does staging run?")
        finally:
            other.execute("rollback")
            other.close()
        idx.embedder.embed(["where does staging run?"])
        assert cached_in_index(idx.conn) == 0


def test_vectors_cached_before_their_file_was_written_are_kept_and_used(tmp_path, memory_dir):
    """A run stopped between a batch's embedding and its file's transaction resumes from the
    cache: rows the index does not hold are never pruned."""
    db = str(tmp_path / "mem.db")
    with HybridIndex(db, embedder=Letters()) as idx:
        idx.chunking()
        texts = ["A chunk embedded before a stop", "and another one"]
        idx.embedder.embed(texts)
    provider = Letters()
    with HybridIndex(db, embedder=provider) as idx:
        assert idx.conn.execute("select count(*) from embedding_cache").fetchone()[0] == 2
        idx.embedder.embed(texts)
    assert provider.asked == []


def test_another_revision_is_not_served_from_the_index(tmp_path, memory_dir):
    db = str(tmp_path / "mem.db")
    with HybridIndex(db, embedder=Letters()) as idx:
        idx.index_folder(str(memory_dir))
        texts = sorted(chunk_texts(idx.conn))
    other = Letters(revision="r2")
    with HybridIndex(db, embedder=other) as idx:
        idx.embedder.embed(texts[:3])
        meta = "select value from meta where key = 'vectors letters'"
        assert idx.conn.execute(meta).fetchone() == ("",)  # mixed from now on: none is trusted
    assert other.asked == texts[:3]
    mine = Letters()
    with HybridIndex(db, embedder=mine) as idx:
        idx.embedder.embed(texts[3:5])
    assert mine.asked == texts[3:5]


QUERIES = ["staging cluster", "python indentation", "数据库迁移"]


def as_schema3(db):
    """Turns an index of this version into one as schema 3 made it: no chunk_keys, no record
    of the vectors' cache id, and every vector also in a WITHOUT ROWID embedding_cache."""
    import hashlib

    conn = connect(db)
    with conn:
        rows = conn.execute(
            "select c.text, v.vector from chunks c join vectors v on v.chunk_id = c.id"
        ).fetchall()
        conn.execute(
            "drop trigger chunk_keys_insert; drop trigger chunk_keys_delete;"
            " drop trigger chunk_keys_update; drop table chunk_keys; drop table embedding_cache;"
            " delete from meta where key in ('vectors letters', 'cache pruned');"
            " update meta set value = 3 where key = 'schema_version';"
            " create table embedding_cache(model_id text, text_sha256 blob, vector blob,"
            " primary key (model_id, text_sha256)) without rowid"
        )
        conn.executemany(
            "insert or replace into embedding_cache values ('letters', ?, ?)",
            [(hashlib.sha256(t.encode("utf-8")).digest(), v) for t, v in rows],
        )
        conn.execute("insert into embedding_cache values ('letters', x'00', x'0000803f')")
    conn.close()


def test_an_index_of_schema_3_upgrades_keeping_every_vector_and_embedding_none(
    tmp_path, memory_dir
):
    db = str(tmp_path / "mem.db")
    with HybridIndex(db, embedder=Letters()) as idx:
        idx.index_folder(str(memory_dir))
        before_texts = chunk_texts(idx.conn)
        old = [[(r.id, r.score) for r in idx.search(q)] for q in QUERIES]
    as_schema3(db)
    conn = connect(db)
    assert schema_version(conn) == 3
    vectors = conn.execute("select chunk_id, vector from vectors order by 1").fetchall()
    assert conn.execute("select count(*) from embedding_cache").fetchone()[0] == len(vectors) + 1
    conn.close()
    provider = Letters()
    with HybridIndex(db, embedder=provider) as idx:
        conn = idx.conn
        assert schema_version(conn) == SCHEMA_VERSION == 7
        assert conn.execute("select chunk_id, vector from vectors order by 1").fetchall() == vectors
        # Only the row no chunk has is left; the vectors' cache id is recorded.
        assert conn.execute("select text_sha256, vector from embedding_cache").fetchall() == [
            (b"\x00", b"\x00\x00\x80\x3f")
        ]
        assert conn.execute("select value from meta where key = 'vectors letters'").fetchone() == (
            "letters",
        )
        assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]
        new = [[(r.id, r.score) for r in idx.search(q)] for q in QUERIES]
        assert [[i for i, _ in a] for a in new] == [[i for i, _ in a] for a in old] and any(new)
        for a, b in zip(new, old, strict=True):  # float32 sums in another order: 1e-8 apart
            assert [x for _, x in a] == pytest.approx([x for _, x in b], abs=1e-6)
        provider.asked = []
        edit(memory_dir)
        idx.index_folder(str(memory_dir))
        assert sorted(provider.asked) == sorted(chunk_texts(conn) - before_texts)


# -- hybridsql stats --------------------------------------------------------------------------


def known_index(tmp_path):
    """An index (no vectors) of two files of known sizes and one memory."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("# Alpha\n\nThe alpha release ships on Monday.\n")
    (folder / "b.md").write_text("# Beta\n\n" + "Beta testers report bugs daily. " * 200 + "\n")
    db = str(tmp_path / "known.db")
    with HybridIndex(db, embedder="none") as idx:
        idx.index_folder(str(folder))
        with idx.conn:
            idx.conn.execute(
                "insert into chunks(kind, path, text, created_at) values ('memory', '', ?, 0)",
                ("remember the milk",),
            )
    text = sum(os.path.getsize(folder / n) for n in ("a.md", "b.md")) + len("remember the milk")
    return db, text


def test_stats_breaks_the_file_down_by_table(tmp_path):
    db, text = known_index(tmp_path)
    out = run_hybridsql("stats", "--db", db)  # piped: JSON
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert found["text_bytes"] == text
    assert found["file_bytes"] == os.path.getsize(db) and found["dbstat"] is True
    assert found["ratio"] == round(found["file_bytes"] / text, 2)
    tables = {t["name"]: t for t in found["tables"]}
    assert sum(t["bytes"] for t in found["tables"]) == found["file_bytes"]
    assert [t["bytes"] for t in found["tables"]] == sorted(
        (t["bytes"] for t in found["tables"]), reverse=True
    )
    conn = apsw.Connection(db)
    for name in ("files", "chunks", "meta"):
        count = conn.execute(f"select count(*) from {name}").fetchone()[0]
        assert tables[name]["rows"] == count
    documents = conn.execute("select count(*) from chunks where kind = 'document'").fetchone()[0]
    assert tables["files"]["rows"] == 2 and tables["chunks"]["rows"] == documents + 1 > 3
    assert tables["chunks_fts"]["rows"] == documents and tables["memories_fts"]["rows"] == 1
    # every b-tree counted once, under its table: shadow tables and indexes are not listed
    assert not {"chunks_fts_data", "chunks_file", "vectors_blocks"} & set(tables)
    pages = conn.execute("select sum(pgsize) from dbstat where name like 'chunks_fts%'")
    assert tables["chunks_fts"]["bytes"] == pages.fetchone()[0]
    conn.close()


def test_stats_lines_for_a_person_and_without_dbstat(tmp_path):
    db, text = known_index(tmp_path)
    conn = connect(db, readonly=True)
    shown = stats.lines(stats.breakdown(conn))
    assert re.fullmatch(
        rf"[\d,]+ bytes in 4,096-byte pages, text {text:,} bytes: \d+\.\d\d x the text", shown[0]
    )
    assert shown[1] == f"{'table':<24} {'bytes':>14} {'share':>7} {'rows':>10}"
    assert all(re.fullmatch(r"\S+ +[\d,]+ +\d+\.\d % +([\d,]+|-)", line) for line in shown[2:])
    bare = stats.lines(stats.breakdown(conn, dbstat=False))
    conn.close()
    assert bare[-1] == (
        "bytes by table need SQLite's dbstat virtual table, which this SQLite lacks"
    )
    chunks = next(x for x in bare if x.startswith("chunks "))
    assert re.fullmatch(r"chunks +- +- +\d+", chunks)


def test_stats_refuses_a_file_that_is_no_index(tmp_path):
    other = str(tmp_path / "other.db")
    apsw.Connection(other).execute("create table t(x)")
    out = run_hybridsql("stats", "--db", other)
    assert out.returncode == 1
    assert out.stderr == f"hybridsql: {other} is not a hybridsql index\n"
    conn = apsw.Connection(other)
    assert conn.execute("select name from sqlite_schema").fetchall() == [("t",)]
