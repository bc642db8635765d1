"""vector_index's storage layout: sized to the database's page size when a table is made (from
format 2, in T_info), the same answers at any page size, and files of format 1 still read and
written (their first write makes them format 3, keeping their layout).
"""

import gzip
import os
import shutil

import apsw
import numpy as np
import pytest

import hybridsql
from hybridsql.db.vectors import VectorReader

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
SQL = "select rowid, score from v where e match ? and k = 10"


def made_at(path, page, spec):
    """A file whose pages are `page` bytes, with table v made by `spec`."""
    first = apsw.Connection(str(path))
    first.execute(f"pragma page_size = {page}; pragma journal_mode = wal")  # writes page 1
    first.close()
    conn = hybridsql.connect(str(path), backend="extension")
    assert conn.execute("pragma page_size").fetchone()[0] == page
    conn.execute(f"create virtual table v using vector_index({spec})")
    return conn


def info(conn):
    return dict(conn.execute("select key, value from v_info").fetchall())


def brute(vecs, alive, q, k=10, where=None):
    ids = [i for i in sorted(alive) if where is None or where(i)]
    m = vecs[np.array(ids) - 1].astype(np.float64)
    s = m @ q / (np.linalg.norm(m, axis=1) * np.linalg.norm(q))
    return [ids[j] for j in np.argsort(-s, kind="stable")[:k]]


def answers(conn, queries):
    out = []
    for q in queries:
        out.append(conn.execute(SQL, (q.tobytes(),)).fetchall())
        out.append(conn.execute(SQL + " and project = 1", (q.tobytes(),)).fetchall())
        out.append(conn.execute(SQL + " and tag < 2", (q.tobytes(),)).fetchall())
    return out


@pytest.mark.parametrize("dims", [96, None])
def test_page_sizes_give_the_same_answers(tmp_path, dims):
    d = dims or 40
    rng = np.random.default_rng(5)
    vecs = rng.standard_normal((2000, d)).astype(np.float32)
    queries = rng.standard_normal((4, d)).astype(np.float32)
    spec = f"e float[{dims or ''}], project integer partition key, tag integer"
    got, layouts = [], []
    for page in (4096, 65536):
        conn = made_at(tmp_path / f"p{page}.db", page, spec)
        with conn:
            conn.executemany(
                "insert into v(rowid, project, tag, e) values (?, ?, ?, ?)",
                [(i + 1, i % 3 // 2, i % 5, v.tobytes()) for i, v in enumerate(vecs)],
            )
        with conn:
            conn.execute("delete from v where rowid % 7 = 0")
            conn.execute("update v set e = ? where rowid = 10", (vecs[0].tobytes(),))
        vecs_now = vecs.copy()
        vecs_now[9] = vecs[0]
        alive = {i for i in range(1, 2001) if i % 7}
        result = answers(conn, queries)
        for n, q in enumerate(queries):
            plain, part, tag = ([r for r, _ in rows] for rows in result[3 * n : 3 * n + 3])
            assert plain == brute(vecs_now, alive, q)
            assert part == brute(vecs_now, alive, q, where=lambda i: (i - 1) % 3 == 2)
            assert tag == brute(vecs_now, alive, q, where=lambda i: (i - 1) % 5 < 2)
        got.append(result)
        check_python_reader(conn, vecs_now, alive, queries, d)
        layouts.append(
            conn.execute(
                "select max(capacity), max(length(data)) from v_blocks, v_vectors"
            ).fetchone()
        )
        assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]
        assert info(conn)["format"] == 3 and info(conn)["page_size"] == page
        conn.close()
    assert got[0] == got[1]
    assert layouts[0] != layouts[1]  # the two pages sizes did lay the rows out differently


def check_python_reader(conn, vecs, alive, queries, d):
    """The numpy and pure-Python paths read the layout the table was made with: the stored
    vector of a row, and the same top 10."""
    for math_ in ("numpy", "python"):
        reader = VectorReader(conn, "v", math_=math_)
        for q in queries:
            assert [r for r, _ in reader.topk(q.tobytes(), 10)] == brute(vecs, alive, q)
    sql = "select " + VectorReader(conn, "v").vector_sql(":id", d, {})
    for rowid in (1, 2, 10, 255, 256, 257, 1999):
        (blob,) = conn.execute(sql, {"id": rowid}).fetchone()
        assert blob == vecs[rowid - 1].tobytes()


def test_info_records_the_layout(tmp_path):
    for page in (4096, 16384, 65536):
        conn = made_at(tmp_path / f"p{page}.db", page, "e float[384], tag integer")
        layout = info(conn)
        assert layout["format"] == 3 and layout["page_size"] == page
        rows, group = layout["block_rows"], layout["group_rows"]
        assert 16 <= rows <= 256 and 1 <= group <= rows
        v = np.random.default_rng(1).standard_normal((2 * rows + 3, 384)).astype(np.float32)
        with conn:
            conn.executemany(
                "insert into v(rowid, tag, e) values (?, 1, ?)",
                [(i + 1, x.tobytes()) for i, x in enumerate(v)],
            )
        assert conn.execute("select capacity, count from v_blocks order by id").fetchall() == [
            (rows, rows),
            (rows, rows),
            (rows, 3),
        ]
        assert conn.execute("select distinct length(data) from v_vectors").fetchall() == [
            (4 * 384 * group,)
        ]
        assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]
        conn.close()


def test_format_1_file_reads_and_writes(tmp_path):
    """tests/data/vector_index_format1.db.gz was made by hybridsql before format 2: 600 rows of
    default_rng(13) in float[24], project = rowid - 1 mod 2, tag = rowid - 1 mod 5."""
    path = tmp_path / "format1.db"
    with gzip.open(os.path.join(DATA, "vector_index_format1.db.gz")) as f, open(path, "wb") as g:
        shutil.copyfileobj(f, g)
    conn = hybridsql.connect(str(path), backend="extension")
    assert info(conn) == {"format": 1}
    vecs = np.random.default_rng(13).standard_normal((900, 24)).astype(np.float32)
    queries = np.random.default_rng(14).standard_normal((3, 24)).astype(np.float32)

    def check(alive):
        for q in queries:
            got = conn.execute(SQL, (q.tobytes(),)).fetchall()
            assert [r for r, _ in got] == brute(vecs, alive, q)
            got = conn.execute(SQL + " and project = 1 and tag >= 3", (q.tobytes(),)).fetchall()
            want = brute(vecs, alive, q, where=lambda i: (i - 1) % 2 == 1 and (i - 1) % 5 >= 3)
            assert [r for r, _ in got] == want

    check(set(range(1, 601)))
    more = np.random.default_rng(15).standard_normal((300, 24)).astype(np.float32)
    vecs[600:] = more
    with conn:
        conn.executemany(
            "insert into v(rowid, project, tag, e) values (?, ?, ?, ?)",
            [(601 + i, (600 + i) % 2, (600 + i) % 5, v.tobytes()) for i, v in enumerate(more)],
        )
        conn.execute("delete from v where rowid % 11 = 0")
    alive = {i for i in range(1, 901) if i % 11}
    check(alive)
    # The first write made it format 3 (checksums: test_vector_damage.py) and kept format 1's
    # layout: 256 rows a block, groups of 128 rows of 24 floats.
    assert info(conn) == {"format": 3}
    assert conn.execute("select max(capacity) from v_blocks").fetchone() == (256,)
    assert conn.execute("select distinct length(data) from v_vectors").fetchall() == [(12288,)]
    assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]
    conn.close()
    conn = hybridsql.connect(str(path), backend="extension")
    check(alive)


def test_connect_keeps_the_page_size_a_file_was_made_with(tmp_path):
    """connect leaves a new file SQLite's page size, and a file made with larger pages (which
    halve a fresh connection's first query: docs/benchmarks.md) keeps them and its layout."""
    conn = hybridsql.connect(str(tmp_path / "new.db"), backend="extension")
    conn.execute("create virtual table v using vector_index(e float[384])")
    assert info(conn)["page_size"] == conn.execute("pragma page_size").fetchone()[0] == 4096
    conn.close()
    made_at(tmp_path / "big.db", 32768, "e float[8]").close()
    conn = hybridsql.connect(str(tmp_path / "big.db"), backend="extension")
    assert conn.execute("pragma page_size").fetchone() == (32768,)
    assert info(conn)["page_size"] == 32768


def test_a_corrupt_layout_is_refused(tmp_path):
    made_at(tmp_path / "c.db", 4096, "e float[8]").close()
    plain = apsw.Connection(str(tmp_path / "c.db"))
    plain.execute("update v_info set value = 300 where key = 'block_rows'")
    plain.close()
    conn = hybridsql.connect(str(tmp_path / "c.db"), backend="extension")
    with pytest.raises(
        apsw.CorruptError, match="vector_index: the layout of v in v_info is corrupt"
    ):
        conn.execute("select count(*) from v").fetchall()
