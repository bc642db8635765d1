"""An index made by the last release (schema 1: vectors in a plain table) opens in this one: it is
upgraded in one transaction to the vector_index table, and answers exactly as that release did."""

import gzip
import os
import shutil

import apsw
import pytest
from conftest import EXAMPLES, check_fts

import hybridsql
from hybridsql.db.schema import SCHEMA_VERSION, schema_version
from hybridsql.indexing.index import HybridIndex
from hybridsql.memory import MemoryStore
from hybridsql.search import SearchOptions

DATA = os.path.join(os.path.dirname(__file__), "data")
NOW = 1795219200.0  # the clock the last release made tests/data/schema1.db.gz with
# The stored vectors were embedded on another CPU: onnxruntime's kernels differ by CPU (AVX-512
# against AVX2) in the last bits of a float32 (about 2e-8 here), so scores built from fresh and
# stored vectors agree to a few float32 epsilons (1.2e-7), not to float64's.
FLOAT32_SCORE = 1e-6
QUERIES = [
    "how should python code be indented?",
    "deploy freeze",
    "postgres upgrade",
    "who is on call",
    "数据库迁移",
    "login loop after SSO",
]


@pytest.fixture
def schema1(tmp_path):
    path = str(tmp_path / "schema1.db")
    with gzip.open(os.path.join(DATA, "schema1.db.gz")) as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def made_by_this_release(path):
    """What tests/data/schema1.db.gz holds, made by this release: the example memory folder
    indexed, then the same memories with the same clock, so that every id is the same. Chunks
    cut as the last release cut them (400 estimated tokens) and embedded as it embedded them (one
    window): an upgraded index is cut again to the window on its next run
    (test_model_reads.py), not by the upgrade."""
    with HybridIndex(path, embedder="local", max_windows=1) as idx:
        idx.chunking = lambda: (400, 80, None)
        idx.index_folder(EXAMPLES)
        store = MemoryStore(idx, clock=lambda: NOW)
        s = store.start_session("tide")
        store.add("Maya wants 4 spaces in Python, never tabs", "tide", "semantic", session_id=s.id)
        b = store.add(
            "Deploys are frozen from 2026-11-26 to 12-01", "tide", "episodic", session_id=s.id
        )
        store.supersede(b.id, "Deploys are frozen from 2026-11-27 to 12-02", session_id=s.id)
        store.add("Billing uses Postgres 16 since the October switchover", "billing", "semantic")


def answers(idx):
    """Document and memory searches, ids and scores."""
    out = []
    for query in QUERIES:
        out.append([(r.id, r.score) for r in idx.search(query, now=NOW, limit=10)])
        store = MemoryStore(idx, clock=lambda: NOW, options=SearchOptions(prefix=True, min_score=0))
        store.ranking.recall_boost = 0.0
        out.append([(h.memory.id, h.score) for h in store.search(query, limit=5)])
    return out


def test_the_last_releases_index_is_upgraded_and_answers_as_a_new_one(schema1, tmp_path):
    conn = apsw.Connection(schema1)
    assert schema_version(conn) == 1
    before = conn.execute(
        "select chunk_id, model_id, vector from vectors order by chunk_id"
    ).fetchall()
    conn.close()
    fresh = str(tmp_path / "fresh.db")
    made_by_this_release(fresh)
    with HybridIndex(schema1, embedder="local") as idx, HybridIndex(fresh, embedder="local") as new:
        conn = idx.conn
        assert schema_version(conn) == SCHEMA_VERSION == 7
        sql = conn.execute("select sql from sqlite_schema where name = 'vectors'").fetchone()[0]
        assert "using vector_index" in sql
        after = conn.execute(
            "select chunk_id, model_id, vector from vectors order by chunk_id"
        ).fetchall()
        assert after == before and len(after) == 77
        names = {r[0] for r in conn.execute("select name from sqlite_schema")}
        assert not names & {"vectors_schema1", "vectors_count_insert", "vectors_model"}
        assert names >= {
            "memories_fts",
            "memories_trigram",
            "memory_chunks",
            "memory_trigram_chunks",
        }
        assert (
            conn.execute("select count(*) from meta where key = 'vectors_version'").fetchone()[0]
            == 0
        )
        assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]
        check_fts(conn)
        for table in ("chunks_fts", "memories_fts"):
            count = f"select count(*) from {table}_docsize"
            assert conn.execute(count).fetchone() == new.conn.execute(count).fetchone()
        got, want = answers(idx), answers(new)
        assert [[i for i, _ in a] for a in got] == [[i for i, _ in a] for a in want]
        for a, b in zip(got, want, strict=True):
            assert [s for _, s in a] == pytest.approx([s for _, s in b], abs=FLOAT32_SCORE)
        assert sum(len(a) for a in got) > 30
        # deleting a chunk still deletes its vector (the trigger was made again)
        conn.execute("delete from chunks where id = 2")
        assert conn.execute("select count(*) from vectors where chunk_id = 2").fetchone()[0] == 0
    with HybridIndex(schema1, embedder="local") as again:  # a second open changes nothing
        assert schema_version(again.conn) == SCHEMA_VERSION
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
    import hybridsql.db.schema as schema

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


# The declaration of schema 2, which sqlite-utils and Datasette did not recognise, over a view
# that schema 5 no longer has.
SCHEMA2_CHUNKS_FTS = """create view document_chunks as
  select id, text from chunks where kind = 'document';
create virtual table chunks_fts using fts5(
  text, content='document_chunks', content_rowid='id',
  tokenize='porter unicode61 remove_diacritics 2'
)"""


def test_a_schema_2_index_is_upgraded_and_answers_the_same(example_db, tmp_path):
    """Schema 2 differs only in how chunks_fts is declared; the upgrade keeps every answer."""
    path = str(tmp_path / "schema2.db")
    shutil.copy(example_db, path)
    with HybridIndex(path, embedder="local") as idx:
        store = MemoryStore(idx, clock=lambda: NOW)
        store.add("Deploys are frozen from 2026-11-26 to 12-01", "tide", "episodic")
        store.add("Maya wants 4 spaces in Python, never tabs", "tide", "semantic")
        idx.conn.execute(
            f"drop table chunks_fts; {SCHEMA2_CHUNKS_FTS};"
            " insert into chunks_fts(chunks_fts) values ('rebuild');"
            " update meta set value = 2 where key = 'schema_version'"
        )
        before = answers(idx)
    with pytest.raises(hybridsql.DatabaseError, match="made by an older hybridsql"):
        HybridIndex(path, readonly=True)  # read-only opens do not upgrade
    with HybridIndex(path, embedder="local") as idx:
        assert schema_version(idx.conn) == SCHEMA_VERSION == 7
        sql = idx.conn.execute("select sql from sqlite_schema where name = 'chunks_fts'")
        assert 'content="chunks"' in sql.fetchone()[0]
        check_fts(idx.conn)
        assert answers(idx) == before and sum(len(a) for a in before) > 30
