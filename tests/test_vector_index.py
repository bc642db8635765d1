"""vector_index, the virtual table that owns its vectors: exact k-nearest answers, after any write,
from any connection, however the file changes under it.

Every answer is checked against cosine_topk over the same rows (the same rows and the same scores,
bit for bit) or a float64 brute force, and every test ends with PRAGMA integrity_check, which
runs the module's own check of its shadow tables.
"""

import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys

import apsw
import numpy as np
import pytest

import hybridsql
from hybridsql.db.vectors import VectorReader

D = 48


def connect(path=":memory:"):
    return hybridsql.connect(str(path), backend="extension")


def create(conn, name="t", dims=D):
    conn.execute(
        f"create virtual table {name} using vector_index(id integer primary key,"
        f" e float[{dims}], project text partition key, n integer, w real)"
    )


def insert(conn, rows, name="t"):
    """rows: (id, vector, project, n) or (id, vector, project, n, w)."""
    with conn:
        conn.executemany(
            f"insert into {name}(id, e, project, n, w) values (?, ?, ?, ?, ?)",
            [(i, np.asarray(v, np.float32).tobytes(), *rest, None)[:5] for i, v, *rest in rows],
        )


def knn(conn, q, k, where="", params=(), name="t"):
    rows = conn.execute(
        f"select rowid, score from {name} where e match ? and k = ? {where}",
        (np.asarray(q, np.float32).tobytes(), k, *params),
    ).fetchall()
    return [i for i, _ in rows], [s for _, s in rows]


def aggregate(conn, q, k, where="", params=(), name="t"):
    """cosine_topk over the rows vector_index holds: what a k-nearest query must equal."""
    got = json.loads(
        conn.execute(
            f"select cosine_topk(?, ?, id, e) from {name} where 1 {where}",
            (np.asarray(q, np.float32).tobytes(), k, *params),
        ).fetchone()[0]
    )
    return [i for i, _ in got], [s for _, s in got]


def brute(store, q, k, keep=lambda i, row: True):
    """The exact top k in float64, ties by id, over store {id: (vector, project, n)}."""
    q64 = np.asarray(q, np.float64)
    scored = []
    for i, row in store.items():
        if not keep(i, row):
            continue
        v = row[0].astype(np.float64)
        nn = float(v @ v) * float(q64 @ q64)
        scored.append((-(0.0 if nn == 0 else max(-1.0, min(1.0, float(v @ q64) / nn**0.5))), i))
    return [i for _, i in sorted(scored)[:k]]


def check(conn):
    assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]


@pytest.fixture
def filled(tmp_path):
    """A file with 3,000 random rows in projects a, b, c (and NULL), with a tie and a zero row;
    n is an integer and w a real, each NULL on some rows."""
    conn = connect(tmp_path / "v.db")
    create(conn)
    rng = np.random.default_rng(11)
    vectors = rng.standard_normal((3000, D)).astype(np.float32)
    vectors[7] = 0.0
    vectors[21] = vectors[20]
    projects = ["a", "b", "c", None]
    store = {
        i: (
            vectors[i],
            projects[i % 4],
            None if i % 37 == 0 else i % 100,
            None if i % 5 == 0 else (i % 50) / 4 - 3,
        )
        for i in range(len(vectors))
    }
    insert(conn, [(i, *row) for i, row in store.items()])
    yield tmp_path / "v.db", conn, store
    check(conn)
    conn.close()


# -- answers ------------------------------------------------------------------------------------


def test_same_rows_and_scores_as_cosine_topk(filled):
    _, conn, store = filled
    rng = np.random.default_rng(5)
    for q in [store[20][0] + 0.001, *rng.standard_normal((8, D)).astype(np.float32)]:
        for k in (1, 10, 100):
            assert knn(conn, q, k) == aggregate(conn, q, k)  # bit for bit
            assert knn(conn, q, k)[0] == brute(store, q, k)
    assert knn(conn, store[20][0], 3)[0][:2] == [20, 21]  # a tie, by id


@pytest.mark.parametrize(
    "where,params,keep",
    [
        ("and project = ?", ("b",), lambda i, r: r[1] == "b"),
        ("and project in ('a', 'c')", (), lambda i, r: r[1] in ("a", "c")),
        ("and project is null", (), lambda i, r: r[1] is None),
        ("and project > 'a'", (), lambda i, r: r[1] is not None and r[1] > "a"),
        ("and n between 10 and 19", (), lambda i, r: r[2] is not None and 10 <= r[2] <= 19),
        ("and n in (3, 5) and project = 'b'", (), lambda i, r: r[2] in (3, 5) and r[1] == "b"),
        ("and n = ?", (7,), lambda i, r: r[2] == 7),
        ("and n = ?", (7.0,), lambda i, r: r[2] == 7),
        ("and n > 9.5 and n <= 12", (), lambda i, r: r[2] is not None and 9.5 < r[2] <= 12),
        ("and n < ?", (3,), lambda i, r: r[2] is not None and r[2] < 3),
        ("and n >= ?", (2**62,), lambda i, r: False),
        ("and n > ?", (-1e300,), lambda i, r: r[2] is not None),
        ("and n is null", (), lambda i, r: r[2] is None),
        ("and n is not null and n != 4", (), lambda i, r: r[2] is not None and r[2] != 4),
        ("and n = ?", ("7",), lambda i, r: r[2] == 7),  # text compared by column affinity
        ("and n = ?", (None,), lambda i, r: False),
        ("and w > 0 and w < 2.25", (), lambda i, r: r[3] is not None and 0 < r[3] < 2.25),
        ("and w = ?", (-3,), lambda i, r: r[3] == -3),
        ("and w <= ?", (1,), lambda i, r: r[3] is not None and r[3] <= 1),
        (
            "and w is null and n < 50",
            (),
            lambda i, r: r[3] is None and r[2] is not None and r[2] < 50,
        ),
        ("and id in (1, 2, 3, 99, 2000, 99999)", (), lambda i, r: i in (1, 2, 3, 99, 2000)),
        ("and id = 42", (), lambda i, r: i == 42),
        ("and id > 2500", (), lambda i, r: i > 2500),
        ("and id >= 10 and id < 400.5", (), lambda i, r: 10 <= i < 400.5),
        ("and rowid <= ? and id > ?", (100, 20), lambda i, r: 20 < i <= 100),
        ("and id < -5", (), lambda i, r: False),
        (
            "and rowid in (select value from json_each(?))",
            (json.dumps(list(range(0, 3000, 3))),),
            lambda i, r: i % 3 == 0,
        ),
        ("and project = 'B' collate nocase", (), lambda i, r: r[1] == "b"),
        ("and project like 'B'", (), lambda i, r: r[1] == "b"),
    ],
)
def test_filters_apply_before_the_top_k(filled, where, params, keep):
    _, conn, store = filled
    q = np.random.default_rng(6).standard_normal(D).astype(np.float32)
    for k in (1, 10, 50):
        got = knn(conn, q, k, where, params)
        assert got[0] == brute(store, q, k, keep), where
        assert got == aggregate(conn, q, k, where, params)


def test_limit_order_by_and_other_columns(filled):
    _, conn, store = filled
    q = store[3][0]
    blob = q.tobytes()
    by_k = conn.execute("select rowid from t where e match ? and k = 5", (blob,)).fetchall()
    by_limit = conn.execute(
        "select rowid from t where e match ? order by score desc limit 5", (blob,)
    ).fetchall()
    assert by_k == by_limit and by_k[0] == (3,)
    offset = conn.execute(
        "select rowid from t where e match ? order by score desc limit 3 offset 2", (blob,)
    ).fetchall()
    assert offset == by_k[2:5]
    row = conn.execute(
        "select id, project, n, e, k, score from t where e match ? and k = 1", (blob,)
    ).fetchone()
    assert row[:3] == (3, store[3][1], store[3][2]) and row[3] == blob and row[4:] == (1, 1.0)
    # a plain query: no score, every column
    assert conn.execute("select id, project, n, score from t where id = 3").fetchall() == [
        (3, store[3][1], store[3][2], None)
    ]
    assert conn.execute("select count(*) from t").fetchone()[0] == len(store)
    assert conn.execute("select count(*) from t where project = 'a'").fetchone()[0] == 750


def test_a_join_asks_the_k_nearest_of_the_table_itself(filled):
    """With another table joined on the rowid, the k-nearest query is still over the whole
    table (the vector table is the outer loop), not k rows for each joined row."""
    _, conn, store = filled
    conn.execute("create table notes(id integer primary key, title text)")
    with conn:
        conn.executemany("insert into notes values (?, ?)", [(i, f"note {i}") for i in store])
    q = store[20][0].tobytes()
    want = knn(conn, store[20][0], 3)[0]
    for sql in (
        "select n.id from notes n join t on t.id = n.id where t.e match ? and t.k = 3",
        "select n.id from t join notes n on n.id = t.rowid where t.e match ? and t.k = 3",
        "select n.id from notes n, t where t.rowid = n.id and t.e match ? and t.k = 3"
        " and n.title like 'note%'",
    ):
        assert [r[0] for r in conn.execute(sql, (q,))] == want, sql


def refusal(name, condition, table="t"):
    return (
        f"{table}: k = N takes the N nearest of the rows its conditions select, and the table"
        f' cannot apply "{name} {condition}" before the top N: write "order by score desc limit'
        f' N" instead of k = N, or put the condition in "rowid in (select rowid from {table}'
        ' where ...)"'
    )


def test_a_k_nearest_query_refuses_what_it_cannot_apply_before_the_top_k(filled):
    """Issue 34: a condition SQLite hands a k-nearest query that the table cannot apply first
    is an error naming it (the other tests of the oracle give these in every SQLite); the same
    condition without k, or inside rowid in (select rowid ...), is applied before the top N."""
    _, conn, store = filled
    conn.create_collation("reverse", lambda a, b: (a < b) - (a > b))
    q = store[20][0]
    refused = [
        ("project = 'a' collate reverse", refusal("project", "= ... collate reverse")),
        ("e = x'00'", refusal("e", "= ...")),
        ("e != x'00'", refusal("e", "!= ...")),
        ("score = 1.0", refusal("score", "= ...")),
        ("score is not 1.0", refusal("score", "is not ...")),
        ("id glob '1*' and n = 3", refusal("rowid", "glob ...")),
    ]
    for where, message in refused:
        with pytest.raises(apsw.SQLError, match="^" + re.escape(message) + "$"):
            knn(conn, q, 5, "and " + where)
    first = "and project = 'a' collate reverse"
    want = brute(store, q, 5, lambda i, row: row[1] == "a")
    assert knn(conn, q, 5, f"and rowid in (select rowid from t where 1 {first})")[0] == want
    rows = conn.execute(
        f"select rowid from t where e match ? {first} order by score desc limit 5", (q.tobytes(),)
    ).fetchall()
    assert [r[0] for r in rows] == want
    # what SQLite tests on the K rows and keeps the same rows as a test before the top K
    best = knn(conn, q, 5)
    assert knn(conn, q, 5, "and score >= ?", (best[1][2],)) == (best[0][:3], best[1][:3])
    assert knn(conn, q, 5, "and e is not null and k > 1 and score is not null") == best


def test_an_or_of_the_tables_conditions_is_tested_on_the_k_rows(filled):
    """SQLite asks about each branch of such an OR, but a MULTI-INDEX OR plan would give the k
    nearest of each branch (more than k rows); the plan is the k-nearest query of the AND terms,
    SQLite tests the OR on its rows (Requirement 10), and rowid in (select ...) applies it
    first."""
    _, conn, store = filled
    q = store[20][0]
    where = "and (rowid in (1, 2, 3) or project = 'b' or n between 3 and 5)"

    def keep(i, row):
        return i in (1, 2, 3) or row[1] == "b" or (row[2] is not None and 3 <= row[2] <= 5)

    assert knn(conn, q, 40, where)[0] == [
        i for i in brute(store, q, 40) if keep(i, None or store[i])
    ]
    assert knn(conn, q, 40, f"and rowid in (select rowid from t where 1 {where})")[0] == brute(
        store, q, 40, keep
    )


def steps(conn, sql, params=()):
    """SQLite's steps (of the statement and of every one it runs, the table's reads of its shadow
    tables among them: a progress handler called at each), and the rows."""
    count = [0]

    def step():
        count[0] += 1
        return 0

    conn.setprogresshandler(step, 1)
    try:
        rows = conn.execute(sql, params).fetchall()
    finally:
        conn.setprogresshandler(None)
    return count[0], rows


KEPT = "and (n = 3 or project = 'a' or rowid % 1000 = 7)"  # a quarter of the rows; SQLite's own


def test_the_exact_form_hands_rows_best_first_and_stops_when_sqlite_does(filled):
    """order by score desc limit N with a condition SQLite keeps (an OR across columns, an
    expression) is the N best of the rows it selects (as cosine_topk over them, bit for bit), and
    SQLite takes the table's rows best first and stops at N: the table rescores only what it hands
    (csrc/vector_index/knn.c). Counted in SQLite's steps, not time: the k form (the condition in
    rowid in (select ...)) steps through every row for its list, and the exact form did too
    before (about 9 steps a row of the table: every row rescored and placed); now it takes fewer
    steps than the table has rows."""
    _, conn, store = filled
    rng = np.random.default_rng(21)
    for q in rng.standard_normal((3, D)).astype(np.float32):
        blob = q.tobytes()
        for n in (1, 5, 10):
            k_form, _ = steps(
                conn,
                f"select rowid from t where e match ? and k = {n}"
                f" and rowid in (select rowid from t where 1 {KEPT})",
                (blob,),
            )
            exact, rows = steps(
                conn,
                f"select id, score from t where e match ? {KEPT} order by score desc limit {n}",
                (blob,),
            )
            want = aggregate(conn, q, n, KEPT.replace("rowid", "id"))
            assert ([i for i, _ in rows], [s for _, s in rows]) == want
            assert exact < len(store) and 10 * exact < k_form, (n, exact, k_form)
        # without ORDER BY the rows come best first too, and a LIMIT with OFFSET counts from there
        rows = conn.execute(f"select id from t where e match ? {KEPT} limit 4 offset 3", (blob,))
        assert [i for (i,) in rows] == aggregate(conn, q, 7, KEPT.replace("rowid", "id"))[0][3:]
    check(conn)


def test_a_loop_that_writes_between_rows_goes_on_from_the_last_row(filled):
    """Rows handed best first come in rounds made from the table as it is: a loop over them that
    writes to the table through the same connection (deletes, inserts, updates, a savepoint rolled
    back) gets next the best row after the last one handed in the table as it now is, as a cursor
    over an index goes on; never a row deleted, a row twice, or a row out of order (a row updated
    after it was handed, which may then come again where its new score puts it, is not here)."""
    _, conn, store = filled
    rng = np.random.default_rng(31)
    q = rng.standard_normal(D).astype(np.float32)
    rows = {i: row[0] for i, row in store.items()}
    kept = {i for i, row in store.items() if row[1] != "c"}

    def after(last):
        """The best kept row after `last` (score, id) in the table as it is, by brute force."""
        best = brute({i: (v,) for i, v in rows.items() if i in kept}, q, len(rows))
        q64 = q.astype(np.float64)
        for i in best:
            v = rows[i].astype(np.float64)
            nn = float(v @ v) * float(q64 @ q64)
            score = 0.0 if nn == 0 else max(-1.0, min(1.0, float(v @ q64) / nn**0.5))
            if (
                last is None
                or score < last[0] - 1e-12
                or (abs(score - last[0]) <= 1e-12 and i > last[1])
            ):
                return i
        return None

    writer = conn.cursor()
    conn.execute("begin")
    last, handed, new_id = None, [], 10_000
    sql = "select id, score from t where e match ? and coalesce(project, '') != 'c' order by score desc"
    for i, score in conn.execute(sql, (q.tobytes(),)):
        assert i == after(last), len(handed)
        last = (score, i)
        handed.append(i)
        if len(handed) % 3 == 0:
            gone = int(rng.choice(sorted(set(rows) - {i})))
            writer.execute("delete from t where id = ?", (gone,))
            del rows[gone]
            kept.discard(gone)
            rows[new_id] = (q + rng.standard_normal(D) * 0.3).astype(np.float32)
            writer.execute(
                "insert into t(id, e, project) values (?, ?, 'a')", (new_id, rows[new_id].tobytes())
            )
            kept.add(new_id)
            new_id += 1
            moved = int(rng.choice(sorted(set(rows) - set(handed))))
            rows[moved] = rng.standard_normal(D).astype(np.float32)
            writer.execute("update t set e = ? where id = ?", (rows[moved].tobytes(), moved))
        if len(handed) % 7 == 0:
            writer.execute("savepoint s")
            writer.execute("delete from t where id = ?", (handed[0],))
            writer.execute("rollback to s")
            writer.execute("release s")
        if len(handed) == 300:
            break
    conn.execute("commit")
    assert len(handed) == len(set(handed)) == 300


def test_nested_queries_on_one_table(filled):
    _, conn, store = filled
    rows = conn.execute(
        "select a.id, (select b.rowid from t b where b.e match a.e and k = 2 and b.id != a.id)"
        " from t a where a.id in (20, 21)"
    ).fetchall()
    assert rows == [(20, 21), (21, 20)]


def test_a_null_query_gives_no_rows_and_errors_are_clear(filled):
    _, conn, _ = filled
    assert conn.execute("select * from t where e match null and k = 3").fetchall() == []
    errors = [
        (
            "select * from t where e match '[1,2]' and k = 3",
            "t: the MATCH vector has 2 dimensions, the table has 48",
        ),
        (
            "select * from t where e match x'00' and k = 3",
            "t: the MATCH vector is a BLOB of 1 bytes, not a multiple of 4",
        ),
        (
            "select * from t where e match :q and k = 0",
            "t: k must be an integer from 1 to 10000, got 0",
        ),
        (
            "select * from t where e match :q and k = 'ten'",
            "t: k must be an integer from 1 to 10000, got text",
        ),
        ("select * from t where k = 3", "t: k = N needs a MATCH vector"),
        ("insert into t(id, e) values (1, :q)", "UNIQUE constraint failed: t.rowid"),
        (
            "insert into t(id, e) values (9000, '[1, 2]')",
            "t: the vector of row 9000 has 2 dimensions, the table has 48",
        ),
        (
            "insert into t(id, e) values (9000, '[1, NaN]')",
            "t: the vector of row 9000 is not a JSON array of numbers",
        ),
        ("insert into t(id, e) values (9000, null)", "t: the vector of row 9000 is NULL"),
        (
            "insert into t(id, e, project) values (9000, :q, 7)",
            "t: column project is text, got integer",
        ),
        ("insert into t(id, e, n) values (9000, :q, 'seven')", "t: column n is integer, got text"),
        (
            "insert into t(id, e, score) values (9000, :q, 1.0)",
            "t: score is computed by a MATCH query, not stored",
        ),
        ("insert into t(id, e) values ('x', :q)", "t: the rowid must be an integer, got text"),
    ]
    q = np.ones(D, np.float32).tobytes()
    for sql, message in errors:
        params = {"q": q} if ":q" in sql else ()
        with pytest.raises(apsw.Error, match="^" + re.escape(message) + "$"):
            conn.execute(sql, params).fetchall()


@pytest.mark.parametrize(
    "columns,message",
    [
        ("project text", "vector_index: a vector column is needed, e.g. embedding float[384]"),
        ("e float[0]", "vector_index: column e: the dimensions of float[N] must be 1 to 65536"),
        ("e float[3], f float[3]", "vector_index: more than one vector column (e and f)"),
        ("e float[3], score real", "vector_index: the column name score is reserved"),
        ("e float[3], p text, P integer", "vector_index: two columns are named P"),
        (
            "e float[3], p blob",
            "vector_index: column p: the type must be float[N], float[],"
            " integer primary key, or text, integer or real with an optional 'partition key';"
            " got 'blob'",
        ),
    ],
)
def test_declaration_errors(columns, message):
    conn = connect()
    with pytest.raises(apsw.Error, match="^" + re.escape(message)):
        conn.execute(f"create virtual table x using vector_index({columns})")


# -- writes ---------------------------------------------------------------------------------------


def test_replace_ignore_update_and_renumber(filled):
    _, conn, store = filled
    q = np.random.default_rng(9).standard_normal(D).astype(np.float32)
    conn.execute("insert or ignore into t(id, e, project) values (5, ?, 'z')", (q.tobytes(),))
    assert conn.execute("select project from t where id = 5").fetchone()[0] == store[5][1]
    conn.execute("insert or replace into t(id, e, project) values (5, ?, 'z')", (q.tobytes(),))
    store[5] = (q, "z", None)
    assert knn(conn, q, 1) == ([5], [1.0])
    conn.execute("update t set project = 'y', n = 4 where id = 5")  # moves to another partition
    store[5] = (q, "y", 4)
    assert knn(conn, q, 1, "and project = 'y'") == ([5], [1.0])
    conn.execute("update t set id = 70000 where id = 5")  # a new rowid
    store[70000] = store.pop(5)
    assert knn(conn, q, 1)[0] == [70000]
    conn.execute("update t set e = ? where id = 70000", ((-q).tobytes(),))
    store[70000] = (-q, "y", 4)
    assert knn(conn, q, 20)[0] == brute(store, q, 20)
    with pytest.raises(apsw.ConstraintError, match="UNIQUE constraint failed: t.rowid"):
        conn.execute("update t set id = 6 where id = 70000")
    conn.execute("update or replace t set id = 6 where id = 70000")
    store[6] = store.pop(70000)
    assert knn(conn, q, 30)[0] == brute(store, q, 30)
    assert conn.execute("select count(*) from t").fetchone()[0] == len(store)


def test_deletes_keep_blocks_dense_and_free_their_pages(tmp_path):
    path = tmp_path / "d.db"
    conn = connect(path)
    create(conn)
    rng = np.random.default_rng(3)
    store = {i: (rng.standard_normal(D).astype(np.float32), "a", 0) for i in range(4000)}
    insert(conn, [(i, *r) for i, r in store.items()])
    blocks = conn.execute("select count(*) from t_blocks").fetchone()[0]
    conn.execute("vacuum")
    conn.execute("pragma wal_checkpoint(truncate)")
    full = os.path.getsize(path)
    with conn:
        conn.execute("delete from t where id % 2 = 0")
    store = {i: r for i, r in store.items() if i % 2}
    assert conn.execute("select count(*) from t_blocks").fetchone()[0] <= blocks // 2 + 1
    q = rng.standard_normal(D).astype(np.float32)
    assert knn(conn, q, 25)[0] == brute(store, q, 25)
    check(conn)
    conn.execute("vacuum")
    conn.execute("pragma wal_checkpoint(truncate)")
    assert os.path.getsize(path) <= 0.6 * full


def test_first_row_of_a_partition_and_growing_blocks(tmp_path):
    conn = connect()
    conn.execute("create virtual table g using vector_index(e float[], kind text partition key)")
    rng = np.random.default_rng(4)
    store = {}
    for i in range(1, 700):  # blocks of 16, 32, ... 256 rows, then more of 256
        v = rng.standard_normal(24 if i % 2 else 8).astype(np.float32)
        conn.execute(
            "insert into g(rowid, e, kind) values (?, ?, ?)", (i, v.tobytes(), f"k{i % 2}")
        )
        store[i] = (v, f"k{i % 2}", 0)
    check(conn)
    for kind, dims in (("k1", 24), ("k0", 8)):
        q = rng.standard_normal(dims).astype(np.float32)
        got = conn.execute(
            "select rowid from g where e match ? and k = 9 and kind = ?", (q.tobytes(), kind)
        ).fetchall()
        assert [r[0] for r in got] == brute(store, q, 9, lambda i, r, kind=kind: r[1] == kind)
    with pytest.raises(apsw.SQLError, match="other vectors of its partition have 24"):
        conn.execute("insert into g(rowid, e, kind) values (5000, '[1, 2]', 'k1')")
    with pytest.raises(
        apsw.SQLError, match="has 8 dimensions, the vectors it is compared with have 24"
    ):
        conn.execute("select * from g where e match ? and k = 3", (q.tobytes(),)).fetchall()


LEAK_CHECK = """
import ctypes
import numpy as np
import apsw, hybridsql

class Mallinfo2(ctypes.Structure):  # glibc's count of the bytes malloc has handed out
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Mallinfo2
def allocated():
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd  # small blocks in use, and mapped ones

conn = hybridsql.connect(":memory:")
conn.execute("create virtual table t using vector_index(e float[])")
rng = np.random.default_rng(1)
with conn:
    for i in range(1, 257):
        conn.execute("insert into t(rowid, e) values (?, ?)", (i, rng.random(384, "f4").tobytes()))
query = np.ones(8, "f4").tobytes()
def ask(times):
    for _ in range(times):
        try:
            conn.execute("select rowid from t where e match ? and k = 3", (query,)).fetchall()
        except apsw.SQLError as e:
            assert "has 8 dimensions" in str(e), e
ask(20)
before = allocated()
ask(600)
print(allocated() - before)
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="glibc's mallinfo2 counts what the C side holds",
)
def test_a_query_of_the_wrong_dimensions_keeps_no_memory(tmp_path):
    """A MATCH vector of other dimensions than a block's is refused after the block is read; a
    block read a second time is read for the cache, which must then give its memory back (the
    fuzzer found each such query keeping the block: 600 of them kept 60 MB)."""
    grown = subprocess.run(
        [sys.executable, "-c", LEAK_CHECK],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,  # not the checkout, whose hybridsql/ may have no library
    ).stdout
    assert int(grown) < 1 << 20, f"{grown} bytes more held after 600 refused queries"


def test_empty_and_null_partition_values_are_partitions_too():
    """'' and NULL are partitions of their own, and a second row of each joins the first's block
    (the remembered last block compares an empty value, which has no bytes to compare)."""
    conn = connect()
    conn.execute("create virtual table p using vector_index(e float[2], kind text partition key)")
    rows = [(1, "[1, 0]", ""), (2, "[0, 1]", ""), (3, "[1, 1]", None), (4, "[1, 2]", None)]
    rows += [(5, "[2, 1]", "x")]
    conn.executemany("insert into p(rowid, e, kind) values (?, ?, ?)", rows)
    assert conn.execute("select count(*) from p_blocks").fetchone()[0] == 3
    knn = "select rowid from p where e match '[1, 0]' and k = 5 and kind "
    assert conn.execute(knn + "= ''").fetchall() == [(1,), (2,)]
    assert conn.execute(knn + "is null").fetchall() == [(3,), (4,)]
    check(conn)


# -- the cache: never a row that is not in the file ---------------------------------------------


def test_writes_from_another_connection_are_seen(filled):
    path, conn, store = filled
    q = np.random.default_rng(8).standard_normal(D).astype(np.float32)
    before, _ = knn(conn, q, 5)
    other = connect(path)
    with other:
        other.execute("insert into t(id, e, project) values (5000, ?, 'a')", ((q * 3).tobytes(),))
        other.execute("delete from t where id = ?", (before[0],))
    other.close()
    after, scores = knn(conn, q, 5)
    assert after[0] == 5000 and scores[0] == pytest.approx(1.0)
    assert before[0] not in after


def test_rollbacks_and_savepoints(filled):
    _, conn, store = filled
    q = np.random.default_rng(9).standard_normal(D).astype(np.float32)
    start = knn(conn, q, 3)
    conn.execute("begin")
    conn.execute("insert into t(id, e) values (6000, ?)", (q.tobytes(),))
    assert knn(conn, q, 3)[0][0] == 6000  # the transaction's own write is seen
    conn.execute("savepoint s")
    conn.execute("delete from t where id = 6000")
    conn.execute("update t set e = ? where id = ?", ((-q).tobytes(), start[0][1]))
    assert 6000 not in knn(conn, q, 3)[0]
    conn.execute("rollback to s")
    assert knn(conn, q, 3)[0][0] == 6000
    conn.execute("rollback")
    assert knn(conn, q, 3) == start  # and forgotten when rolled back
    check(conn)


@pytest.mark.parametrize("seed", range(6))
def test_rows_held_within_a_statement_answer_as_rows_written_one_by_one(tmp_path, seed):
    """A statement's appended rows are held and written together (csrc/vector_index/held.c, Appended):
    random transactions of many-row inserts (some failing at a late row), one-row inserts,
    deletes, updates, savepoints released and rolled back to, and reads between them, in
    autocommit mode and in BEGIN, give every read the rows a plain dict holds (the same ids,
    partitions, metadata and exact k nearest), the last_insert_rowid that SQLite set, and an
    integrity_check of ok, then the same again from a fresh connection."""
    rng = np.random.default_rng(seed)
    d = 8
    path = tmp_path / "held.db"
    conn = connect(path)
    create(conn, dims=d)
    conn.execute("create table log(x)")
    store, next_id = {}, [1]
    projects = ["a", "b", None]

    def new_rows(n, project=None):
        rows = []
        for _ in range(n):
            i = next_id[0]
            next_id[0] += int(rng.integers(1, 3))
            p = project if project is not None and rng.random() < 0.8 else rng.choice(projects)
            rows.append((i, rng.standard_normal(d).astype(np.float32), p, int(rng.integers(9))))
        return rows

    def insert_sql(rows):
        sql = "insert into t(id, e, project, n) values " + ", ".join(["(?, ?, ?, ?)"] * len(rows))
        return sql, [v for i, e, p, n in rows for v in (i, e.tobytes(), p, n)]

    def same(conn, store):
        q = rng.standard_normal(d).astype(np.float32)
        k = int(rng.integers(1, 20))
        # First numpy's reader, which reads the shadow tables themselves (in a savepoint of its
        # own, which writes the rows held), then the table.
        found = VectorReader(conn, "t", math_="numpy").topk(q.tobytes(), len(store) + 1)
        assert [i for i, _ in found] == brute(store, q, len(store) + 1)
        got = conn.execute("select id, project, n, e from t order by id").fetchall()
        want = [(i, p, n, e.tobytes()) for i, (e, p, n, _) in sorted(store.items())]
        assert got == want
        assert knn(conn, q, k)[0] == brute(store, q, k)
        assert knn(conn, q, k, "and project = 'a'")[0] == brute(
            store, q, k, lambda i, row: row[1] == "a"
        )

    for transaction in range(12):
        explicit = transaction % 3 != 0
        if explicit:
            conn.execute("begin")
        saved = []  # (savepoint name, the store as it was)
        for _ in range(int(rng.integers(3, 9))):
            op = rng.random()
            if op < 0.35:  # many rows, mostly of one partition: held and written together
                rows = new_rows(int(rng.integers(2, 700)), rng.choice(projects))
                conn.execute(*insert_sql(rows))
                assert conn.last_insert_rowid() == rows[-1][0]  # as SQLite sets it, not a block's
                conn.execute("insert into log values (1)")
                logged = conn.last_insert_rowid()
                assert conn.execute("select count(*) from t").fetchone()[0] >= 0
                assert conn.last_insert_rowid() == logged  # a read that writes held rows
                store.update({i: (e, p, n, None) for i, e, p, n in rows})
            elif op < 0.45 and explicit and store:  # a late row collides: the statement goes
                rows = new_rows(int(rng.integers(2, 400)))
                rows[-1] = (min(store), *rows[-1][1:])
                with pytest.raises(apsw.ConstraintError):
                    conn.execute(*insert_sql(rows))
            elif op < 0.55:  # one row a statement: held from one statement to the next
                for row in new_rows(int(rng.integers(1, 40))):
                    conn.execute(*insert_sql([row]))
                    store[row[0]] = (row[1], row[2], row[3], None)
            elif op < 0.65 and store:
                gone = [int(i) for i in rng.choice(sorted(store), min(len(store), 30))]
                conn.execute(f"delete from t where id in ({', '.join('?' * len(gone))})", gone)
                for i in gone:
                    store.pop(i, None)
            elif op < 0.75 and store:
                i = int(rng.choice(sorted(store)))
                e, p = rng.standard_normal(d).astype(np.float32), rng.choice(projects)
                conn.execute("update t set e = ?, project = ? where id = ?", (e.tobytes(), p, i))
                store[i] = (e, p, store[i][2], None)
            elif op < 0.85 and explicit:
                name = f"s{len(saved)}"
                conn.execute(f"savepoint {name}")
                saved.append((name, dict(store)))
            elif op < 0.92 and saved:
                name, then = saved[-1]
                conn.execute(f"rollback to {name}")
                store = dict(then)
            elif saved:
                name, _ = saved.pop()
                conn.execute(f"release {name}")
            if rng.random() < 0.4:
                same(conn, store)
        if explicit:
            conn.execute("commit")
        same(conn, store)
        check(conn)
    conn.close()
    conn = connect(path)
    same(conn, store)
    check(conn)
    conn.close()


def test_a_failed_statement_in_a_transaction_leaves_nothing_half_done(filled):
    _, conn, store = filled
    q = np.random.default_rng(10).standard_normal(D).astype(np.float32)
    conn.execute("begin")
    with pytest.raises(apsw.ConstraintError):  # the third row collides: the statement goes
        conn.execute(
            "insert into t(id, e) values (7000, ?1), (7001, ?1), (1, ?1), (7002, ?1)",
            (q.tobytes(),),
        )
    check(conn)
    conn.execute("commit")
    assert conn.execute("select count(*) from t where id >= 7000").fetchone()[0] == 0
    assert knn(conn, q, 10)[0] == brute(store, q, 10)


def test_backup_restore_attach_swap_drop_and_recreate_vacuum(filled, tmp_path):
    path, conn, store = filled
    rng = np.random.default_rng(12)
    q = rng.standard_normal(D).astype(np.float32)
    want = knn(conn, q, 10)
    backup = connect(tmp_path / "backup.db")
    with backup.backup("main", conn, "main") as b:
        b.step()
    backup.close()
    with conn:  # change every row the answer holds, then restore the backup
        conn.executemany("delete from t where id = ?", [(i,) for i in want[0]])
    assert set(knn(conn, q, 10)[0]).isdisjoint(want[0])
    source = connect(tmp_path / "backup.db")
    with conn.backup("main", source, "main") as b:
        b.step()
    source.close()
    assert knn(conn, q, 10) == want  # the cache served nothing the restored file lacks

    # ATTACH: two files under one name, one after the other
    for name, seed in (("x1.db", 1), ("x2.db", 2)):
        c = connect(tmp_path / name)
        create(c)
        insert(
            c,
            [
                (i, np.random.default_rng(seed * 1000 + i).standard_normal(D), "a", 0)
                for i in range(300)
            ],
        )
        c.close()
    for name, seed in (("x1.db", 1), ("x2.db", 2), ("x1.db", 1)):
        conn.execute("attach ? as aux", (str(tmp_path / name),))
        got = knn(conn, q, 5, name="aux.t")[0]
        rows = {
            i: (
                np.random.default_rng(seed * 1000 + i).standard_normal(D).astype(np.float32),
                "a",
                0,
            )
            for i in range(300)
        }
        assert got == brute(rows, q, 5)
        conn.execute("detach aux")

    # DROP and recreate with other rows
    conn.execute("drop table t")
    assert (
        conn.execute("select count(*) from sqlite_schema where name like 't_%'").fetchone()[0] == 0
    )
    create(conn)
    fresh = {i: (rng.standard_normal(D).astype(np.float32), "a", 0) for i in range(500)}
    insert(conn, [(i, *r) for i, r in fresh.items()])
    assert knn(conn, q, 10)[0] == brute(fresh, q, 10)
    conn.execute("vacuum")
    assert knn(conn, q, 10)[0] == brute(fresh, q, 10)
    store.clear()
    store.update(fresh)


def test_a_restored_copy_under_another_process(filled, tmp_path):
    """A long-lived connection, and the file replaced by a copy made earlier (cp, not the backup
    API), as a restore from a file backup does."""
    path, conn, store = filled
    q = np.random.default_rng(13).standard_normal(D).astype(np.float32)
    want = knn(conn, q, 10)
    conn.execute("pragma wal_checkpoint(truncate)")
    shutil.copy(path, tmp_path / "copy.db")
    with conn:
        conn.executemany("update t set e = ? where id = ?", [((-q).tobytes(), i) for i in want[0]])
    assert set(knn(conn, q, 10)[0]).isdisjoint(want[0])
    code = (
        "import shutil, sys, hybridsql;"
        "c = hybridsql.connect(sys.argv[1]);"
        "s = hybridsql.connect(sys.argv[2]);"
        "b = c.backup('main', s, 'main'); b.step(); b.finish()"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(path), str(tmp_path / "copy.db")], check=True, cwd=tmp_path
    )
    assert knn(conn, q, 10) == want


def test_reentry_is_a_clear_error_never_memory_corruption(tmp_path):
    """A shadow table replaced by a view that reads the table itself, and a trigger on a shadow
    table that writes to it: each re-enters the module, which refuses (run in a subprocess, so
    that a crash under the sanitizers fails this test, not the suite)."""
    code = r"""
import sys, apsw, hybridsql
c = hybridsql.connect(":memory:")
c.execute("create virtual table t using vector_index(e float[2], p text partition key, m text)")
c.execute("insert into t(rowid, e, p, m) values (1, '[1,0]', 'a', 'x'), (2, '[0,1]', 'a', 'x')")
c.execute("create table u(x); create trigger tr after insert on t_rowids begin delete from t where rowid = 1; end")
try:
    c.execute("insert into t(rowid, e, p, m) values (3, '[1,1]', 'a', 'x')")
except apsw.Error as e:
    print(e)
c.execute("drop trigger tr")
c.execute("alter table t_rowids rename to t_rowids_real")
c.execute("create view t_rowids as select rowid as id, block, slot, m0, rowid as rowid from t_rowids_real where exists (select 1 from t where e match '[1,0]' and k = 1)")
for cond in ("rowid in (1, 2)", "rowid > 0", "m = 'x'"):
    try:  # t_rowids, now the view, is read: it re-enters
        print(c.execute(f"select rowid from t where e match '[1,0]' and k = 1 and {cond}").fetchall())
    except apsw.Error as e:
        print(e)
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # the trigger's DELETE first looks for its row: a read inside the write
    reentered = (
        "t: read again while it is being read or written (a trigger or view on its shadow tables?)"
    )
    # a text metadata filter is looked up in t_rowids, and every row a k-nearest query scores
    # has its location checked there (test_vector_damage.py): each query re-enters
    assert lines == [reentered] * 4


# -- hard vectors: the first pass's bound lets nothing slip -----------------------------------


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
def test_exact_on_hard_vectors_in_every_backend(tmp_path, kind):
    """The int8 bound lets no row slip that belongs in the top k: vector_index, cosine_topk and
    the numpy and pure-Python readers give the exact top k, for every k and with filters."""
    rng = np.random.default_rng(12)
    vectors = hard_vectors(kind, rng)
    conn = connect(tmp_path / "hard.db")
    conn.execute(
        "create virtual table t using vector_index(id integer primary key, e float[48], m text partition key)"
    )
    with conn:
        conn.executemany(
            "insert into t(id, e, m) values (?, ?, 'm')",
            [(i, v.tobytes()) for i, v in enumerate(vectors)],
        )
    readers = [VectorReader(conn, "t", math_=m) for m in ("numpy", "python")]
    picks = vectors[rng.choice(len(vectors), 3)]
    queries = [*picks, picks[0] + 1e-6, rng.standard_normal(vectors.shape[1]).astype(np.float32)]
    keep = list(range(0, len(vectors), 7))
    for q in queries:
        for k in (1, 10, 100, len(vectors)):
            got = knn(conn, q, k)
            assert_exact(got, vectors, q, k)
            assert got == aggregate(conn, q, k), (kind, k)
            for reader in readers[: 1 if k > 100 else 2]:
                hits = reader.topk(q.tobytes(), k, {"m": "m"})
                assert_exact(([i for i, _ in hits], [s for _, s in hits]), vectors, q, k)
        ids = ",".join(map(str, keep))
        assert_exact(knn(conn, q, 10, f"and id in ({ids})"), vectors, q, 10, keep)
        for k in (10, 300):  # the exact form, with a condition SQLite keeps: handed best first
            rows = conn.execute(
                "select id, score from t where e match ? and id % 7 = 0 order by score desc"
                f" limit {k}",
                (q.tobytes(),),
            ).fetchall()
            got = ([i for i, _ in rows], [s for _, s in rows])
            assert_exact(got, vectors, q, k, keep)
            assert got == aggregate(conn, q, k, "and id % 7 = 0"), (kind, k)
        hits = readers[0].topk(q.tobytes(), 10, None, keep)
        assert_exact(([i for i, _ in hits], [s for _, s in hits]), vectors, q, 10, keep)
    check(conn)


# -- every way in -------------------------------------------------------------------------------

USER_SQL = [
    "create virtual table notes_vec using vector_index(embedding float[4], project text partition key)",
    "insert into notes_vec(rowid, embedding, project) values (1, '[1, 0, 0, 0]', 'x'),"
    " (2, '[0.9, 0.1, 0, 0]', 'x'), (3, '[1, 0, 0, 0.01]', 'y'), (4, '[0, 1, 0, 0]', 'x')",
    "select rowid, round(score, 6) as score from notes_vec"
    " where embedding match '[1, 0, 0, 0]' and k = 2 and project = 'x'",
]
USER_ROWS = [(1, 1.0), (2, 0.993884)]


def test_a_users_table_in_the_stock_shell(tmp_path):
    proc = subprocess.run(
        [
            "sqlite3",
            "-json",
            str(tmp_path / "u.db"),
            f".load {hybridsql.loadable_path()}",
            *USER_SQL,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert [(r["rowid"], r["score"]) for r in json.loads(proc.stdout)] == USER_ROWS
    check(connect(tmp_path / "u.db"))


def test_a_users_table_in_apsw():
    conn = apsw.Connection(":memory:")
    hybridsql.load(conn)
    for sql in USER_SQL[:2]:
        conn.execute(sql)
    assert conn.execute(USER_SQL[2]).fetchall() == USER_ROWS


def test_a_users_table_in_sqlite_utils(tmp_path):
    import sqlite_utils

    db = sqlite_utils.Database(tmp_path / "u.db")
    if hybridsql.backend_of(db.conn) != "extension":
        pytest.skip(
            "this Python's sqlite3 cannot load extensions, and pysqlite3-binary (which"
            " sqlite-utils uses instead) is not installed: sqlite-utils cannot see vector_index"
        )
    for sql in USER_SQL[:2]:
        db.execute(sql)
    assert [tuple(r) for r in db.execute(USER_SQL[2]).fetchall()] == USER_ROWS
    cli = os.path.join(os.path.dirname(sys.executable), "sqlite-utils")
    out = subprocess.run(
        [cli, "query", str(tmp_path / "u.db"), USER_SQL[2]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert [(r["rowid"], r["score"]) for r in json.loads(out)] == USER_ROWS


# -- kill -9 in the middle of writes ------------------------------------------------------------

WRITER = r"""
import sys, numpy as np, hybridsql
conn = hybridsql.connect(sys.argv[1])
rng = np.random.default_rng(int(sys.argv[2]))
i = int(sys.argv[2]) * 1000000
while True:
    with conn:
        for _ in range(50):
            i += 1
            op = rng.random()
            if op < 0.6:
                conn.execute("insert or replace into t(id, e, project, n) values (?, ?, ?, ?)",
                             (i, rng.standard_normal(48).astype(np.float32).tobytes(), "abc"[i % 3], i % 7))
            elif op < 0.8:
                conn.execute("delete from t where id = (select id from t where id % 5 = ? limit 1)", (i % 5,))
            else:
                conn.execute("update t set project = ? where id = (select max(id) from t)", ("abc"[i % 3],))
    print(i, flush=True)
"""


def test_kill_9_mid_write_then_integrity_and_exact_answers(tmp_path):
    path = tmp_path / "k.db"
    conn = connect(path)
    create(conn)
    conn.close()
    rng = np.random.default_rng(14)
    for round_ in range(6):
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(path), str(round_ * 10 + w)],
                stdout=subprocess.PIPE,
                cwd=tmp_path,
            )
            for w in range(2)
        ]
        for p in procs:
            p.stdout.readline()  # at least one transaction done
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
            p.stdout.close()
        conn = connect(path)
        check(conn)
        rows = conn.execute("select id, e, project, n from t").fetchall()
        store = {i: (np.frombuffer(e, np.float32), p, n) for i, e, p, n in rows}
        q = rng.standard_normal(D).astype(np.float32)
        assert knn(conn, q, 10)[0] == brute(store, q, 10)
        assert knn(conn, q, 10, "and project = 'b'")[0] == brute(
            store, q, 10, lambda i, r: r[1] == "b"
        )
        conn.close()
