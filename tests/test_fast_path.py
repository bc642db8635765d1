"""vector_topk, the packed fast path: the same answers as cosine_topk, kept fresh after writes."""

import json
import re

import numpy as np
import pytest

import hybridsql
from hybridsql.schema import ensure_schema

N, D = 3000, 64


@pytest.fixture
def db(tmp_path):
    """A hybridsql schema with N random vectors of model 'm' and 200 of model 'other'."""
    path = str(tmp_path / "fast.db")
    conn = hybridsql.connect(path, backend="extension")
    ensure_schema(conn)
    rng = np.random.default_rng(11)
    vectors = rng.standard_normal((N, D)).astype(np.float32)
    vectors[7] = 0.0  # scores 0.0
    vectors[21] = vectors[20]  # a tie, broken by id
    with conn:
        conn.executemany(
            "insert into vectors values (?, 'm', ?)",
            [(i, v.tobytes()) for i, v in enumerate(vectors)],
        )
        conn.executemany(
            "insert into vectors values (?, 'other', ?)",
            [(N + i, rng.standard_normal(D).astype(np.float32).tobytes()) for i in range(200)],
        )
    yield path, conn, vectors
    conn.close()


def fast(conn, q, k, ids=None, precision=None, model="m"):
    rows = conn.execute(
        "select id, score from vector_topk(?, ?, ?, ?, ?)",
        (q.tobytes(), k, model, None if ids is None else json.dumps(ids), precision),
    ).fetchall()
    return [i for i, _ in rows], [s for _, s in rows]


def aggregate(conn, q, k, where=""):
    got = json.loads(
        conn.execute(
            f"select cosine_topk(?, ?, chunk_id, vector) from vectors where model_id = 'm' {where}",
            (q.tobytes(), k),
        ).fetchone()[0]
    )
    return [i for i, _ in got], [s for _, s in got]


def test_same_rows_and_scores_as_cosine_topk(db):
    _, conn, vectors = db
    rng = np.random.default_rng(5)
    for q in [vectors[20] + 0.001, *rng.standard_normal((10, D)).astype(np.float32)]:
        for k in (1, 10, 100):
            assert fast(conn, q, k) == aggregate(conn, q, k)  # identical, bit for bit
    ids, _ = fast(conn, vectors[20], 3)
    assert ids[:2] == [20, 21]


def test_ids_filter_takes_the_top_k_among_them(db):
    _, conn, vectors = db
    q = np.random.default_rng(6).standard_normal(D).astype(np.float32)
    keep = list(range(3, N, 10)) + [999999, 3]  # an unknown id and a duplicate are ignored
    ids, scores = fast(conn, q, 10, ids=keep)
    assert (ids, scores) == aggregate(conn, q, 10, "and chunk_id % 10 = 3")
    assert fast(conn, q, 10, ids=[]) == ([], [])


def test_model_is_respected_and_null_means_every_row(db):
    _, conn, vectors = db
    q = vectors[5]
    ids, _ = fast(conn, q, 50)
    assert all(i < N for i in ids)
    ids, _ = fast(conn, q, 5, model="other")
    assert all(i >= N for i in ids)
    assert fast(conn, q, 1, model=None)[0] == [5]


def test_writes_from_another_connection_are_seen(db):
    path, conn, vectors = db
    q = np.random.default_rng(8).standard_normal(D).astype(np.float32)
    before, _ = fast(conn, q, 5)
    other = hybridsql.connect(path)
    with other:
        other.execute("insert into vectors values (?, 'm', ?)", (5000, (q * 3).tobytes()))
        other.execute("delete from vectors where chunk_id = ?", (before[0],))
    other.close()
    after, scores = fast(conn, q, 5)
    assert after[0] == 5000 and scores[0] == pytest.approx(1.0)
    assert before[0] not in after


def test_writes_and_rollbacks_on_this_connection(db):
    _, conn, vectors = db
    q = np.random.default_rng(9).standard_normal(D).astype(np.float32)
    start, _ = fast(conn, q, 3)
    conn.execute("begin")
    conn.execute("insert into vectors values (?, 'm', ?)", (6000, q.tobytes()))
    inside, _ = fast(conn, q, 3)
    assert inside[0] == 6000  # the transaction's own write is seen
    conn.execute("rollback")
    assert fast(conn, q, 3)[0] == start  # and forgotten when rolled back
    conn.execute("update vectors set vector = ? where chunk_id = ?", ((-q).tobytes(), start[0]))
    assert start[0] not in fast(conn, q, 3)[0]


def test_int8_recall_against_exact(db):
    _, conn, vectors = db
    rng = np.random.default_rng(10)
    queries = vectors[rng.choice(N, 30)] + 0.3 * rng.standard_normal((30, D)).astype(np.float32)
    hits = 0
    for q in queries:
        exact, _ = aggregate(conn, q, 10)
        approx, scores = fast(conn, q, 10, precision="int8")
        hits += len(set(exact) & set(approx))
        assert scores == sorted(scores, reverse=True)
    assert hits / (30 * 10) >= 0.98


FAST_ERRORS = [
    (
        "select * from vector_topk('[1,2]', 3)",
        "vector_topk(): 1st argument has 2 dimensions, the vectors have 64",
    ),
    (
        "select * from vector_topk(x'00', 3)",
        "vector_topk(): 1st argument is a BLOB of 1 bytes, not a multiple of 4",
    ),
    (
        "select * from vector_topk(:q, 0)",
        "vector_topk(): 2nd argument k must be an integer from 1 to 10000, got 0",
    ),
    (
        "select * from vector_topk(:q, 'ten')",
        "vector_topk(): 2nd argument k must be an integer from 1 to 10000, got text",
    ),
    (
        "select * from vector_topk(:q, 3, 7)",
        "vector_topk(): 3rd argument model must be text, got integer",
    ),
    (
        "select * from vector_topk(:q, 3, 'm', '[1, x]')",
        "vector_topk(): 4th argument ids must be a JSON array of integers",
    ),
    (
        "select * from vector_topk(:q, 3, 'm', null, 'int4')",
        "vector_topk(): 5th argument precision must be 'float32' or 'int8'",
    ),
    ("select * from vector_topk", "vector_topk(): needs a query vector and k"),
    ("select * from vector_topk(:q, 3, 'm', '[9999999999999999999]')", "vector_topk(): 4th argument ids must be a JSON array of integers"),
]


@pytest.mark.parametrize("sql,message", FAST_ERRORS)
def test_exact_errors(db, sql, message):
    _, conn, vectors = db
    params = {"q": vectors[1].tobytes()} if ":q" in sql else ()
    with pytest.raises(Exception, match="^" + re.escape(message) + "$"):
        conn.execute(sql, params).fetchall()


def test_bad_stored_rows_and_missing_schema_are_errors(db, tmp_path):
    _, conn, vectors = db
    conn.execute("insert into vectors values (9000, 'm', x'0000803f0000803f')")
    with pytest.raises(
        Exception, match=re.escape("vector_topk(): row 9000 has 2 dimensions, row 0 has 64")
    ):
        fast(conn, vectors[1], 3)
    conn.execute(
        "update vectors set vector = ? where chunk_id = 9000",
        (np.full(D, np.nan, np.float32).tobytes(),),
    )
    with pytest.raises(
        Exception,
        match=re.escape("vector_topk(): the vector of row 9000 has a non-finite value at index 0"),
    ):
        fast(conn, vectors[1], 3)
    bare = hybridsql.connect(str(tmp_path / "bare.db"))
    with pytest.raises(
        Exception, match=re.escape("vector_topk(): this database has no hybridsql index")
    ):
        bare.execute("select * from vector_topk('[1]', 1)").fetchall()


def test_null_query_gives_no_rows(db):
    _, conn, _ = db
    assert conn.execute("select * from vector_topk(null, 3)").fetchall() == []


def test_registered_as_an_eponymous_module():
    conn = hybridsql.connect(":memory:")
    names = {r[0] for r in conn.execute("select name from pragma_module_list")}
    assert "vector_topk" in names
