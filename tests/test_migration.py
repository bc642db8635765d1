"""An index made by the last release (schema 1: vectors in a plain table) opens in this one: it is
upgraded in one transaction to the vector_index table, and answers exactly as that release did."""

import gzip
import json
import os
import shutil

import apsw
import pytest

import hybridsql
from hybridsql.index import HybridIndex
from hybridsql.memory import MemoryStore
from hybridsql.schema import SCHEMA_VERSION, schema_version
from hybridsql.search import SearchOptions

DATA = os.path.join(os.path.dirname(__file__), "data")


@pytest.fixture
def schema1(tmp_path):
    path = str(tmp_path / "schema1.db")
    with gzip.open(os.path.join(DATA, "schema1.db.gz")) as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def test_the_last_releases_index_is_upgraded_and_answers_the_same(schema1):
    with open(os.path.join(DATA, "schema1-answers.json"), encoding="utf-8") as f:
        answers = json.load(f)
    conn = apsw.Connection(schema1)
    assert schema_version(conn) == 1
    before = conn.execute(
        "select chunk_id, model_id, vector from vectors order by chunk_id"
    ).fetchall()
    conn.close()
    with HybridIndex(schema1, embedder="local") as idx:
        conn = idx.conn
        assert schema_version(conn) == SCHEMA_VERSION == 2
        sql = conn.execute("select sql from sqlite_schema where name = 'vectors'").fetchone()[0]
        assert "using vector_index" in sql
        after = conn.execute(
            "select chunk_id, model_id, vector from vectors order by chunk_id"
        ).fetchall()
        assert after == before and len(after) == 77
        names = {r[0] for r in conn.execute("select name from sqlite_schema")}
        assert not names & {"vectors_schema1", "vectors_count_insert", "vectors_model"}
        assert (
            conn.execute("select count(*) from meta where key = 'vectors_version'").fetchone()[0]
            == 0
        )
        assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]
        now = answers["now"]
        for query, want in answers["documents"].items():
            got = idx.search(query, now=now, max_results=10)
            assert [r.id for r in got] == [i for i, _ in want], query
            assert [r.score for r in got] == pytest.approx([s for _, s in want], abs=1e-9)
        store = MemoryStore(
            idx, clock=lambda: now, options=SearchOptions(prefix=True, min_score=0.0)
        )
        store.ranking.recall_boost = 0.0
        for query, want in answers["memories"].items():
            got = store.search(query, limit=5)
            assert [h.memory.id for h in got] == [i for i, _ in want], query
            assert [h.score for h in got] == pytest.approx([s for _, s in want], abs=1e-9)
        # deleting a chunk still deletes its vector (the trigger was made again)
        conn.execute("delete from chunks where id = 2")
        assert conn.execute("select count(*) from vectors where chunk_id = 2").fetchone()[0] == 0
    with HybridIndex(schema1, embedder="local") as again:  # a second open changes nothing
        assert schema_version(again.conn) == 2
        assert again.conn.execute("select count(*) from vectors").fetchone()[0] == 76


def test_rows_the_new_table_refuses_are_left_out_and_embedded_again(schema1):
    conn = apsw.Connection(schema1)
    with conn:
        conn.execute("update vectors set vector = x'0000c07f' where chunk_id = 5")  # NaN, 1 dim
        conn.execute("update vectors set vector = x'00' where chunk_id = 6")  # not float32
    conn.close()
    with HybridIndex(schema1, embedder="local") as idx:
        ids = [r[0] for r in idx.conn.execute("select chunk_id from vectors")]
        assert len(ids) == 75 and 5 not in ids and 6 not in ids
        assert idx.embed_missing() == 2
        assert idx.conn.execute("pragma integrity_check").fetchall() == [("ok",)]


def test_an_upgrade_that_fails_changes_nothing(schema1, monkeypatch):
    """The upgrade is one transaction: stopped half way, the file is still schema 1."""
    import hybridsql.schema as schema

    def fail(conn):
        conn.execute("alter table vectors rename to vectors_schema1")
        raise apsw.FullError("disk full")

    monkeypatch.setattr(schema, "_upgrade_from_1", fail)
    with pytest.raises(hybridsql.DatabaseError, match="the disk is full") as failed:
        HybridIndex(schema1, embedder="local")
    assert isinstance(failed.value.__cause__, apsw.FullError)
    conn = hybridsql.connect(schema1)
    assert schema_version(conn) == 1
    assert conn.execute("select count(*) from vectors").fetchone()[0] == 77


def test_an_index_from_a_newer_release_is_refused(schema1):
    conn = apsw.Connection(schema1)
    with conn:
        conn.execute("update meta set value = 99 where key = 'schema_version'")
    conn.close()
    with pytest.raises(hybridsql.DatabaseError, match="made by a newer hybridsql"):
        HybridIndex(schema1, embedder="local")
