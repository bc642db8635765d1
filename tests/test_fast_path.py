"""vector_topk, the packed fast path: the same answers as cosine_topk, kept fresh after writes."""

import json
import re

import numpy as np
import pytest

import hybridsql
from hybridsql.schema import ensure_schema
from hybridsql.search import numpy_topk

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


@pytest.mark.parametrize("precision", [None, "int8", "float32"])
def test_same_rows_and_scores_as_cosine_topk(db, precision):
    _, conn, vectors = db
    rng = np.random.default_rng(5)
    for q in [vectors[20] + 0.001, *rng.standard_normal((10, D)).astype(np.float32)]:
        for k in (1, 10, 100):
            # identical, bit for bit
            assert fast(conn, q, k, precision=precision) == aggregate(conn, q, k)
    ids, _ = fast(conn, vectors[20], 3)
    assert ids[:2] == [20, 21]


def test_ids_filter_takes_the_top_k_among_them(db):
    _, conn, vectors = db
    q = np.random.default_rng(6).standard_normal(D).astype(np.float32)
    keep = list(range(3, N, 10)) + [999999, 3]  # an unknown id and a duplicate are ignored
    ids, scores = fast(conn, q, 10, ids=keep)
    assert (ids, scores) == aggregate(conn, q, 10, "and chunk_id % 10 = 3")
    assert fast(conn, q, 10, ids=[]) == ([], [])
    shuffled = list(range(3, N, 10)) * 2  # in any order, with every id twice
    np.random.default_rng(7).shuffle(shuffled)
    assert fast(conn, q, 10, ids=shuffled) == (ids, scores)
    assert fast(conn, q, 10, ids=sorted(shuffled, reverse=True)) == (ids, scores)


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


def hard_vectors(kind, rng, n=2000, d=48):
    """Vectors that make an int8 first pass misjudge rows, if anything does."""
    base = rng.standard_normal(d).astype(np.float32)
    if kind == "near duplicates":  # every row within the int8 error of every other
        return base + 1e-5 * rng.standard_normal((n, d)).astype(np.float32)
    if kind == "magnitudes":  # from 1e-30 to 1e30, and subnormal values
        v = rng.standard_normal((n, d)) * 10.0 ** rng.uniform(-30, 30, (n, 1))
        v[:50] = rng.standard_normal((50, d)) * 1e-42
        return v.astype(np.float32)
    if kind == "one large value":  # int8 steps far wider than the other values
        v = rng.standard_normal((n, d)).astype(np.float32)
        v[:, 0] = 1e4
        return v
    if kind == "ties":  # ten distinct vectors, each 200 times, and zero vectors
        v = np.repeat(rng.standard_normal((10, d)).astype(np.float32), n // 10, axis=0)
        v[::97] = 0.0
        return v
    raise ValueError(kind)


def assert_exact(got, vectors, q, k, keep=None):
    """`got` is the exact top k in float64 (ties by id), up to rounding: its ids are distinct
    and allowed, and the float64 score of each, position by position, is the exact k-th."""
    v = vectors.astype(np.float64)
    q = q.astype(np.float64)
    norms = np.sqrt((v * v).sum(axis=1) * (q @ q))
    scores = np.divide(v @ q, norms, out=np.zeros(len(v)), where=norms > 0).clip(-1, 1)
    allowed = np.arange(len(v)) if keep is None else np.array(sorted(set(keep)))
    want = sorted(scores[allowed], reverse=True)[:k]
    ids, got_scores = got
    assert len(set(ids)) == len(ids) and set(ids) <= set(allowed.tolist())
    assert [scores[i] for i in ids] == pytest.approx(want, abs=1e-12)
    assert got_scores == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("kind", ["near duplicates", "magnitudes", "one large value", "ties"])
def test_first_passes_are_exact_on_hard_vectors(tmp_path, kind):
    """The first passes' error bounds let no row slip that belongs in the top k: vector_topk
    (int8 and float32), cosine_topk and the numpy path give the exact top k, for every k and
    with filters."""
    rng = np.random.default_rng(12)
    vectors = hard_vectors(kind, rng)
    conn = hybridsql.connect(str(tmp_path / "hard.db"), backend="extension")
    ensure_schema(conn)
    with conn:
        conn.executemany(
            "insert into vectors values (?, 'm', ?)",
            [(i, v.tobytes()) for i, v in enumerate(vectors)],
        )
    picks = vectors[rng.choice(len(vectors), 4)]
    queries = [*picks, picks[0] + 1e-6, rng.standard_normal(vectors.shape[1]).astype(np.float32)]
    keep = list(range(0, len(vectors), 7))
    for q in queries:
        for k in (1, 10, 100, len(vectors)):
            got = aggregate(conn, q, k)
            assert_exact(got, vectors, q, k)
            assert fast(conn, q, k, precision="int8") == got, (kind, k)
            assert fast(conn, q, k, precision="float32") == got, (kind, k)
            hits = numpy_topk(vectors, np.arange(len(vectors)), q, k)
            assert_exact(([i for i, _ in hits], [s for _, s in hits]), vectors, q, k)
        for precision in ("int8", "float32"):
            assert_exact(fast(conn, q, 10, ids=keep, precision=precision), vectors, q, 10, keep)
        assert_exact(aggregate(conn, q, 10, "and chunk_id % 7 = 0"), vectors, q, 10, keep)
    conn.close()


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
    (
        "select * from vector_topk(:q, 3, 'm', '[9999999999999999999]')",
        "vector_topk(): 4th argument ids must be a JSON array of integers",
    ),
    # a trailing comma is malformed whether or not the id before it is known
    (
        "select * from vector_topk(:q, 3, 'm', '[99,]')",
        "vector_topk(): 4th argument ids must be a JSON array of integers",
    ),
    (
        "select * from vector_topk(:q, 3, 'm', '[999999,]')",
        "vector_topk(): 4th argument ids must be a JSON array of integers",
    ),
    (
        "select * from vector_topk(:q, 3, 'm', '[-9223372036854775809]')",
        "vector_topk(): 4th argument ids must be a JSON array of integers",
    ),
]


def test_ids_take_every_int64(db):
    _, conn, vectors = db
    with conn:
        conn.execute("insert into vectors values (-9223372036854775808, 'm', ?)", (vectors[3],))
    ids = "select json_group_array(chunk_id) from vectors where chunk_id < 0 or chunk_id = 3"
    got = conn.execute(f"select id from vector_topk(?, 5, 'm', ({ids}))", (vectors[3],)).fetchall()
    assert got == [(-9223372036854775808,), (3,)]


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
