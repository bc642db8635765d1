"""LangChain: the store and retriever pass LangChain's own standard suites (langchain-tests,
unmodified), and the hybrid retriever's filters, search types and what it writes (an ordinary
index the CLI searches) are checked here."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("langchain_core", reason="the langchain extra is not installed")

from langchain_core.documents import Document  # noqa: E402
from langchain_tests.integration_tests import (  # noqa: E402
    RetrieversIntegrationTests,
    VectorStoreIntegrationTests,
)

from hybridsql.errors import QueryError  # noqa: E402
from hybridsql.integrations.langchain import (  # noqa: E402
    HybridSQLEmbeddings,
    HybridSQLRetriever,
    HybridSQLVectorStore,
)


class TestStandardVectorStore(VectorStoreIntegrationTests):
    @pytest.fixture()
    def vectorstore(self, tmp_path):
        store = HybridSQLVectorStore(str(tmp_path / "lc.db"), self.get_embeddings())
        try:
            yield store
        finally:
            store.close()


NOTES = [
    ("Python code is indented with four spaces, never tabs.", {"topic": "style", "year": 2024}),
    ("Deploys freeze on Fridays after 3pm.", {"topic": "ops", "year": 2025}),
    ("The database is backed up every night with Litestream.", {"topic": "ops", "year": 2023}),
    ("Use pytest for every test, with fixtures in conftest.py.", {"topic": "style", "year": 2026}),
    ("Error E1234 means the cache is cold; warm it first.", {"topic": "ops", "year": 2026}),
]


@pytest.fixture(scope="module")
def local_embeddings():
    return HybridSQLEmbeddings()


@pytest.fixture(scope="module")
def notes_store(tmp_path_factory, local_embeddings):
    path = tmp_path_factory.mktemp("notes") / "notes.db"
    store = HybridSQLVectorStore(str(path), local_embeddings)
    store.add_texts([t for t, _ in NOTES], [m for _, m in NOTES], ids=[str(i) for i in range(5)])
    yield store
    store.close()


class TestStandardRetriever(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self):
        return HybridSQLRetriever

    @property
    def retriever_constructor_params(self):
        return {"vectorstore": self._store}

    @property
    def retriever_query_example(self) -> str:
        return "how should python be indented?"

    @pytest.fixture(autouse=True)
    def _with_store(self, notes_store):
        self._store = notes_store


def test_hybrid_finds_exact_words_and_meaning(notes_store):
    # an error code only words find, and a paraphrase only meaning finds
    assert notes_store.hybrid_search("E1234", k=1)[0].id == "4"
    assert notes_store.hybrid_search("indentation rules for source files", k=1)[0].id == "0"
    assert notes_store.keyword_search("Litestream", k=3)[0].id == "2"


@pytest.mark.parametrize(
    "where, want",
    [
        ({"topic": "ops"}, {"1", "2", "4"}),
        ({"year": {"$gte": 2025}}, {"1", "3", "4"}),
        ({"year": {"$in": [2023, 2024]}}, {"0", "2"}),
        ({"year": {"$nin": [2023, 2024]}}, {"1", "3", "4"}),
        ({"topic": {"$ne": "ops"}}, {"0", "3"}),
        ({"$or": [{"topic": "style"}, {"year": 2023}]}, {"0", "2", "3"}),
        ({"$and": [{"topic": "ops"}, {"year": {"$lt": 2026}}]}, {"1", "2"}),
        ({"topic": "ops", "year": 2026}, {"4"}),
        ({"$not": {"topic": "ops"}}, {"0", "3"}),
        ({"missing": {"$exists": False}}, {"0", "1", "2", "3", "4"}),
        ({"topic": {"$like": "st%"}}, {"0", "3"}),
    ],
)
@pytest.mark.parametrize("search_type", ["hybrid", "similarity", "mmr", "keyword"])
def test_filters_apply_before_the_top_k(notes_store, where, want, search_type):
    # k = 1 with a filter: the best of the filtered documents, never an empty answer because
    # the best document overall was filtered out after the top k
    retriever = notes_store.as_retriever(search_type=search_type, k=1, filter=where)
    query = "deploys python litestream pytest error cache" if search_type == "keyword" else "code"
    got = retriever.invoke(query)
    assert len(got) == 1 and got[0].id in want
    everything = notes_store.as_retriever(search_type=search_type, k=5, filter=where)
    found = {d.id for d in everything.invoke(query)}
    if search_type in ("similarity", "mmr"):  # the k nearest, whatever their cosine
        assert found == want
    else:  # hybrid and keyword leave out what neither words nor meaning match
        assert found and found <= want


def test_bad_filters_and_search_types_say_so_in_one_line(notes_store):
    with pytest.raises(QueryError, match="unknown operator '\\$regex'"):
        notes_store.hybrid_search("x", filter={"topic": {"$regex": "o"}})
    with pytest.raises(ValueError, match="search_type of fuzzy not allowed"):
        notes_store.as_retriever(search_type="fuzzy")


def test_what_the_store_writes_is_an_index_the_cli_searches(tmp_path, local_embeddings):
    db = str(tmp_path / "cli.db")
    store = HybridSQLVectorStore(db, local_embeddings)
    store.add_documents([Document(page_content=t, metadata=m) for t, m in NOTES], ids=list("abcde"))
    store.close()
    out = subprocess.run(
        [sys.executable, "-m", "hybridsql", "search", "tabs or spaces?", "--db", db, "-n", "1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "four spaces" in out
    reopened = HybridSQLVectorStore(db, local_embeddings)
    assert [d.page_content for d in reopened.get_by_ids(["b"])] == [NOTES[1][0]]
    reopened.close()


def test_hostile_filter_keys_and_values_are_bound(tmp_path):
    from langchain_core.embeddings import DeterministicFakeEmbedding

    store = HybridSQLVectorStore(str(tmp_path / "h.db"), DeterministicFakeEmbedding(size=8))
    key, value = "k'\"] ) or 1=1; --", "v' or '1'='1"
    store.add_texts(["one", "two"], [{key: value}, {key: "other"}], ids=["1", "2"])
    for search_type in ("hybrid", "similarity", "mmr"):
        got = store.as_retriever(search_type=search_type, k=2, filter={key: value}).invoke("one")
        assert [d.id for d in got] == ["1"]
    assert store.collection.count() == 2
    store.close()


def test_the_frameworks_pages_examples_print_what_the_page_says(tmp_path):
    """docs/frameworks.md: each python block, run from another folder, prints the block that
    follows it. Its index goes in a folder of tempfile's, here under tmp_path (TMPDIR), which
    goes with it."""
    import re

    page = (Path(__file__).parent.parent / "docs" / "frameworks.md").read_text()
    pairs = re.findall(r"```python\n(.*?)```\n.*?```\n(.*?)```", page, re.S)
    assert len(pairs) == 2
    for code, shown in pairs:
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env={**os.environ, "TMPDIR": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == shown


def test_collections_and_indexed_folders_share_an_index_without_mixing(tmp_path):
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from hybridsql.indexing.index import HybridIndex

    db = str(tmp_path / "shared.db")
    idx = HybridIndex(db, embedder="none")
    idx.index_folder(str(Path(__file__).parent.parent / "examples" / "memory"))
    fake = DeterministicFakeEmbedding(size=8)
    a = HybridSQLVectorStore(embedding=fake, collection="a", index=idx)
    b = HybridSQLVectorStore(embedding=fake, collection="b", index=idx)
    a.add_texts([f"deploy note {i}" for i in range(20)], ids=[f"a{i}" for i in range(20)])
    b.add_texts([f"deploy note {i}" for i in range(20)], ids=[f"b{i}" for i in range(20)])
    for search_type in ("hybrid", "similarity", "mmr", "keyword"):
        found = a.as_retriever(search_type=search_type, k=20).invoke("deploy note 3")
        assert found and all(d.id.startswith("a") for d in found), search_type
    assert len(a.similarity_search("deploy note 3", k=50)) == 20
    # a third of the index's documents: vector_index hands its rows best first and SQLite tests
    # that they are the collection's (Collection.most); listed, the same documents, same scores
    q = fake.embed_query("deploy note 3")
    both = []
    for most in (True, False):
        a.collection.most = lambda most=most: most
        found = a.collection.nearest(q, k=7)
        both.append([(f.id, f.score) for f in found])
        found = a.collection.search("deploy note 3", k=7, query_vector=q, mode="semantic")
        both.append([(f.id, f.score) for f in found])
    assert both[0] == both[2] and both[1] == both[3] and len(both[0]) == 7
    del a.collection.most
    a.delete([f"a{i}" for i in range(10)])
    assert a.collection.count() == 10 and b.collection.count() == 20
    folder = "select count(*) from files where root not like 'collection:%'"
    assert idx.conn.execute(folder).fetchone()[0] > 0  # the folder's notes stay
    idx.close()


def test_text_keys_are_kept_for_files_and_memories_not_for_a_collections_documents(tmp_path):
    """chunk_keys, where the Embedder looks up a text's vector before it embeds the text, holds
    the key of every chunk of an indexed folder and of every memory, and none of a collection's
    documents (the caller's embeddings make their vectors), whatever adds, edits, replaces or
    deletes them. An index whose trigger an earlier release wrote gets this release's at its
    next writing open (and not at a read-only one)."""
    from langchain_core.embeddings import DeterministicFakeEmbedding

    import hybridsql
    from hybridsql.db import schema
    from hybridsql.indexing.index import HybridIndex
    from hybridsql.memory import MemoryStore

    want = (
        "select c.id, length(c.text), substr(c.text, -24) from chunks c"
        " left join files f on f.id = c.file_id"
        " where f.root is null or f.root not like 'collection:%' order by c.id"
    )
    have = "select chunk_id, length, tail from chunk_keys order by chunk_id"

    def check(conn):
        keys = conn.execute(have).fetchall()
        assert keys == conn.execute(want).fetchall()
        return {k for (k, _, _) in keys}

    db = str(tmp_path / "keys.db")
    idx = HybridIndex(db, embedder="none")
    idx.index_folder(str(Path(__file__).parent.parent / "examples" / "memory"))
    memory = MemoryStore(idx).add("the staging cluster moved to eu-west-3")
    store = HybridSQLVectorStore(embedding=DeterministicFakeEmbedding(size=8), index=idx)
    store.add_texts([f"deploy note {i}" for i in range(30)], ids=[f"d{i}" for i in range(30)])
    keyed = check(idx.conn)
    assert memory.id in keyed and len(keyed) > 1
    documents = "select c.id from chunks c join files f on f.id = c.file_id"
    documents += " where f.root like 'collection:%'"
    assert len(idx.conn.execute(documents).fetchall()) == 30
    # Edits as another client makes them (SQL), replacements and deletes by the store.
    idx.conn.execute(f"update chunks set text = 'edited ' || text where id in ({documents})")
    idx.conn.execute("update chunks set text = 'edited ' || text where id = ?", (min(keyed),))
    store.add_texts(
        ["replaced"] * 1 + [f"again {i}" for i in range(9)], ids=[f"d{i}" for i in range(10)]
    )
    store.delete([f"d{i}" for i in range(20, 30)])
    assert check(idx.conn) == keyed
    idx.close()

    old = (
        "drop trigger chunk_keys_insert; create trigger chunk_keys_insert after insert on chunks"
        " begin insert into chunk_keys values (length(new.text), substr(new.text, -24), new.id);"
        " end;"
    )
    conn = hybridsql.connect(db)
    conn.execute(old)
    conn.close()
    trigger = "select sql from sqlite_schema where name = 'chunk_keys_insert'"
    with HybridIndex(db, embedder="none", readonly=True) as idx:
        assert "where not exists" not in idx.conn.execute(trigger).fetchone()[0]
    idx = HybridIndex(db, embedder="none")
    assert idx.conn.execute(trigger).fetchone()[0] == schema.TRIGGERS["chunk_keys_insert"]
    store = HybridSQLVectorStore(embedding=DeterministicFakeEmbedding(size=8), index=idx)
    store.add_texts(["after the upgrade"], ids=["new"])
    check(idx.conn)
    idx.close()


async def test_concurrent_async_calls_share_one_store(tmp_path):
    """LangChain's async methods run the store in executor threads: many at once, no error."""
    import asyncio

    from langchain_core.embeddings import DeterministicFakeEmbedding

    store = HybridSQLVectorStore(str(tmp_path / "a.db"), DeterministicFakeEmbedding(size=8))
    writes = [store.aadd_texts([f"note {i} deploy"], ids=[str(i)]) for i in range(40)]
    reads = [store.asimilarity_search(f"note {i}", k=3) for i in range(40)]
    hybrid = [store.as_retriever(k=2).ainvoke(f"deploy {i}") for i in range(40)]
    done = await asyncio.gather(*writes, *reads, *hybrid)
    assert list(done[:40]) == [[str(i)] for i in range(40)]
    assert store.collection.count() == 40
    store.close()


def test_new_ids_are_uuid7s_that_sort_in_the_order_they_were_made(tmp_path, monkeypatch):
    """The ids add_texts makes read back as version 7 UUIDs written as str(uuid.UUID) writes
    them, carry the millisecond they were made, differ, and sort (as text) in the order they
    were made: within a call, across calls in the same millisecond, and when the clock goes
    back."""
    import time
    import uuid

    from hybridsql.integrations import documents
    from hybridsql.integrations.langchain import new_ids

    before = time.time_ns() // 1_000_000
    ids = new_ids(2000) + new_ids(1) + new_ids(3)
    after = time.time_ns() // 1_000_000
    assert len(set(ids)) == len(ids) and new_ids(0) == [] and ids == sorted(ids)
    for i in ids:
        u = uuid.UUID(i)
        assert (str(u), u.version, u.variant) == (i, 7, uuid.RFC_4122)
        assert before <= u.int >> 80 <= after
    # A clock set back an hour: the ids go on from the last one, not back in time.
    now = time.time_ns()
    monkeypatch.setattr(documents.time, "time_ns", lambda: now - 3_600_000_000_000)
    later = new_ids(5)
    assert later == sorted(later) and later[0] > ids[-1]
    # A millisecond's counter spent: the next millisecond's ids, still in order.
    monkeypatch.setattr(documents, "_LAST_ID", [now // 1_000_000, (1 << 42) - 3])
    spent = new_ids(4)
    assert spent == sorted(spent) and uuid.UUID(spent[0]).int >> 80 == now // 1_000_000 + 1
    monkeypatch.undo()
    store = HybridSQLVectorStore(str(tmp_path / "ids.db"))
    made = store.add_texts(["one", "two", "three"], ids=["given", None, ""])
    assert made[0] == "given" and all(uuid.UUID(i).version == 7 for i in made[1:])
    assert [d.id for d in store.get_by_ids(made)] == made
    store.close()


# Documents for the bulk write's tests: English, accented, CJK (the trigram tables) and mixed.
BULK = [
    f"{i} {w} "
    + ["deploy cache", "café naïve résumé", "缓存 部署 设置", "rollback 「回滚」 now"][i % 4]
    for i, w in enumerate(
        ("alpha beta gamma delta epsilon zeta eta theta iota kappa " * 30).split()
    )
]


def fts_writes(store, texts, per_call):
    """How many pages FTS5 writes to chunks_fts's index while ``texts`` are added, ``per_call``
    a call."""
    writes = []

    def profile(sql, _ns):
        if sql.startswith("REPLACE INTO 'main'.'chunks_fts_data'"):
            writes.append(sql)

    conn = store.index.conn
    conn.set_profile(profile)
    for s in range(0, len(texts), per_call):
        store.add_texts(texts[s : s + per_call], ids=[str(i) for i in range(s, s + per_call)])
    conn.set_profile(None)
    return len(writes)


def test_add_texts_makes_one_fts5_segment_a_call_not_one_a_document(tmp_path):
    """A call's chunks go in by few statements: FTS5, which writes what it holds in memory as a
    new segment at each statement's savepoint, wrote a segment a document (and merged them
    again and again) when each chunk was a statement of its own."""
    store = HybridSQLVectorStore(str(tmp_path / "bulk.db"))
    assert len(BULK) == 300
    assert fts_writes(store, BULK, 300) < 30
    store.close()


@pytest.mark.parametrize("mode", ["hybrid", "keyword"])
def test_a_call_of_many_answers_as_calls_of_one(tmp_path, mode):
    """The same documents added in one call and one a call, then half of them replaced (their
    ids given again with other texts): the same full-text tables (words, trigram rows,
    chunk_keys) and the same answers, scores included, to every query."""
    from conftest import check_fts
    from langchain_core.embeddings import DeterministicFakeEmbedding

    embedding = DeterministicFakeEmbedding(size=16)
    stores = [
        HybridSQLVectorStore(str(tmp_path / f"{name}.db"), embedding) for name in ("bulk", "one")
    ]
    same = [
        "select id, text from chunks order by id",
        "select rowid from chunks_trigram order by rowid",
        "select count(*) from chunks_trigram where chunks_trigram match '部署'",
        "select f.path, m.metadata from files f join document_metadata m on m.file_id = f.id",
        "select chunk_id, vector from vectors order by chunk_id",
    ]
    for texts in (BULK, BULK[150:]):
        for store, per_call in zip(stores, (len(texts), 1), strict=True):
            fts_writes(store, texts, per_call)
            check_fts(store.index.conn)
        for sql in same:
            a, b = (s.index.conn.execute(sql).fetchall() for s in stores)
            assert a == b and a, sql
        for query in ("deploy", "café", "缓存", "回滚", "alpha gamma", "résumé kappa 7"):
            found = [
                [(d.id, score) for d, score in s.hybrid_search_with_score(query, k=20)]
                if mode == "hybrid"
                else [d.id for d in s.keyword_search(query, k=20)]
                for s in stores
            ]
            assert found[0] == found[1] and found[0], query
    assert stores[0].collection.count() == 300
    for store in stores:
        store.close()


def test_vectors_given_as_lists_are_stored_as_array_stored_them(tmp_path):
    """A vector given as a list of numbers is packed into the float32 bytes that array('f')
    made of it, value for value (rounding, subnormals, -0.0, ints, bools, numpy scalars); values
    that do not fit are refused with the errors they had (vector_index's, array's)."""
    from array import array

    import apsw
    import numpy as np

    from hybridsql.integrations.documents import Collection, _float32

    rng = np.random.default_rng(3)
    edges = [0.0, -0.0, 1e-45, -1e-46, 1.401298464324817e-45, 3.4028234663852886e38, 1, True]
    edges += [np.float32(0.1), np.float64(1 / 3), 2**-149, 3.4028235e38 * 0.9999999]
    rows = [edges] + [
        list(rng.standard_normal(384) * 10.0 ** rng.integers(-40, 38)) for _ in range(50)
    ]
    for row in rows:
        assert _float32(row) == array("f", row).tobytes()
    store = HybridSQLVectorStore(str(tmp_path / "v.db"))
    collection = Collection(store.index, "v", model_id="m")
    collection.add(["a"], [{}], ["a"], vectors=[edges])
    assert collection.vectors(["a"])["a"].tobytes() == array("f", edges).tobytes()
    message = r"vectors: the vector of row \d+ has a non-finite value at index 0"
    for beyond in (3.5e38, float("inf")):
        with pytest.raises(apsw.SQLError, match=message):
            collection.add(["b"], [{}], ["b"], vectors=[[beyond, 0.0]])
    with pytest.raises(TypeError, match="must be real number, not str"):
        collection.add(["b"], [{}], ["b"], vectors=[["1", 0.0]])
    store.close()


class Planted:
    """LangChain Embeddings whose vectors are given: each text's, and the query's [1, 0, 0],
    so that each document's cosine to the query is known."""

    def __init__(self, vectors: dict):
        self.vectors = vectors

    def embed_documents(self, texts):
        return [self.vectors[t] for t in texts]

    def embed_query(self, text):
        return [1.0, 0.0, 0.0]


def at_cosine(c: float) -> list:
    return [c, (1 - c * c) ** 0.5, 0.0]


PLANTED = {"same": at_cosine(1.0), "half": at_cosine(0.5), "apart": at_cosine(-0.3)}


@pytest.mark.filterwarnings("ignore:Relevance scores must be between 0 and 1")
def test_relevance_is_langchains_one_minus_the_cosine_distance(tmp_path):
    """Issue 39, item 13: LangChain's relevance for cosine is 1 - the cosine distance, the
    cosine itself (its own _cosine_relevance_score_fn); ours was (1 + cos) / 2, so a
    score_threshold of 0.3 kept a document whose cosine is -0.3 (relevance 0.35)."""
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import VectorStore

    embeddings = type("PlantedEmbeddings", (Planted, Embeddings), {})(PLANTED)
    store = HybridSQLVectorStore(str(tmp_path / "r.db"), embeddings)
    store.add_texts(list(PLANTED), ids=list(PLANTED))
    # LangChain warns of a relevance under 0, which a cosine under 0 is by its own convention.
    with pytest.warns(UserWarning, match="Relevance scores must be between 0 and 1"):
        scored = store.similarity_search_with_relevance_scores("q", k=3)
    want = {"same": 1.0, "half": 0.5, "apart": -0.3}
    for doc, relevance in scored:
        assert relevance == pytest.approx(want[doc.id], abs=1e-6)
        assert relevance == pytest.approx(VectorStore._cosine_relevance_score_fn(1 - want[doc.id]))
    kept = store.similarity_search_with_relevance_scores("q", k=3, score_threshold=0.3)
    assert [d.id for d, _ in kept] == ["same", "half"]
    retriever = store.as_retriever(
        search_type="similarity_score_threshold", search_kwargs={"score_threshold": 0.6, "k": 3}
    )
    assert [d.id for d in retriever.invoke("q")] == ["same"]
    store.close()


def test_langchains_and_sqlitevecs_method_names(tmp_path):
    """Issue 39, item 14: LangChain's similarity_search_with_score_by_vector (this store's
    own spelling stays, the same method), and SQLiteVec's get_dimensionality."""
    from langchain_core.embeddings import DeterministicFakeEmbedding

    store = HybridSQLVectorStore(str(tmp_path / "n.db"), DeterministicFakeEmbedding(size=8))
    store.add_texts(["one", "two"], ids=["1", "2"])
    vector = store.embedding.embed_query("one")
    found = store.similarity_search_with_score_by_vector(vector, k=1)
    assert [(d.id, round(s, 6)) for d, s in found] == [("1", 1.0)]
    assert store.similarity_search_by_vector_with_score(vector, k=1) == found
    assert store.get_dimensionality() == 8
    store.close()
    keyword_only = HybridSQLVectorStore(str(tmp_path / "k.db"))
    with pytest.raises(QueryError, match="no dimensionality"):
        keyword_only.get_dimensionality()
    keyword_only.close()


def test_from_texts_takes_a_default_file_and_sqlitevecs_arguments(tmp_path, monkeypatch):
    """Issue 39, item 14: `from_texts(texts, embedding)` and SQLiteVec's `table=`, `db_file=`
    failed with "give db_path (the index file) or index". With no file named, the store is
    hybridsql.db in the current folder (SQLiteVec's is vec.db there); db_file and table are
    db_path and collection; an argument neither store has is named in one line with those
    this one takes."""
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from hybridsql.indexing.index import HybridIndex

    monkeypatch.chdir(tmp_path)
    embedding = DeterministicFakeEmbedding(size=8)
    store = HybridSQLVectorStore.from_texts(["one", "two"], embedding)
    assert store.index.conn.filename == str(tmp_path / "hybridsql.db")
    assert store.collection.count() == 2
    store.close()
    store = HybridSQLVectorStore.from_texts(
        ["three"], embedding, table="notes", db_file=str(tmp_path / "vec-like.db")
    )
    store.close()
    with HybridIndex(str(tmp_path / "vec-like.db"), embedder="none") as index:
        assert HybridSQLVectorStore(index=index, collection="notes").collection.count() == 1
        assert HybridSQLVectorStore(index=index).collection.count() == 0
    with pytest.raises(QueryError) as refused:
        HybridSQLVectorStore.from_texts(["x"], embedding, connection=None)
    assert str(refused.value) == (
        "from_texts takes metadatas, ids, db_path, collection, index (SQLiteVec's db_file and"
        " table as db_path and collection), not connection"
    )
    with pytest.raises(QueryError, match="db_file is SQLiteVec's name of db_path: give one"):
        HybridSQLVectorStore.from_texts(["x"], embedding, db_path="a.db", db_file="b.db")
    assert not os.path.exists(tmp_path / "a.db")
