"""vector_index on damaged files and interrupted queries (issue 26, items 5, 6 and 14).

A damaged shadow row is SQLITE_CORRUPT naming the table and the block, never "out of memory"
(which rolls back the caller's whole transaction) or a wrong vector; PRAGMA integrity_check
reports it (the module's xIntegrity, SQLite 3.44 and later: apsw's SQLite runs it, the stock
Debian 12 shell's 3.40.1 does not). A table whose shadow tables were dropped, renamed or
replaced by views can still be dropped. An interrupted query is SQLITE_INTERRUPT, and the index
answers as before afterwards.
"""

import importlib.util
import os
import platform
import random
import re
import shutil
import subprocess
import sys

import apsw
import numpy as np
import pytest
from conftest import EXAMPLES, ROOT, run_hybridsql

import hybridsql
from hybridsql.mcp.server import Guard, ToolError

SHADOWS = ("info", "blocks", "codes", "vectors", "rowids")
DECLARATION = "e float[2], p text partition key, m integer, s text"
KNN = "select rowid, score from t where e match '[1,0]' and k = 3"
# what each way of reading or writing a block gets from a damaged one
STATEMENTS = (
    KNN,
    "select rowid, e, p, m, s from t",
    "insert into t(rowid, e, p, m, s) values (100, '[0.5,0.5]', 'a', 1, 'y')",
    "delete from t where rowid = 3",
    "update t set e = '[0,1]' where rowid = 3",
    "update t set p = 'b' where rowid = 3",
)


def connect(path=":memory:"):
    return hybridsql.connect(str(path), backend="extension")


def make(path):
    """A file with table t: 10 rows in one block (id 1, room for 16) of partition 'a', and a
    plain table `other` for the caller's own writes."""
    conn = connect(path)
    conn.execute(f"create virtual table t using vector_index({DECLARATION})")
    with conn:
        for i in range(1, 11):
            a = 0.15 * i
            conn.execute(
                "insert into t(rowid, e, p, m, s) values (?, json_array(cos(?), sin(?)), 'a', ?,"
                " 'x')",
                (i, a, a, i),
            )
    conn.execute("create table other(x)")
    return conn


def checks(conn):
    return (
        conn.execute("pragma integrity_check").fetchall(),
        conn.execute("pragma quick_check").fetchall(),
    )


def in_transaction(conn):
    return not conn.get_autocommit()


# -- item 5: damaged rows ----------------------------------------------------------------------

BLOCK_DAMAGE = [
    ("dims", 0, "it has 0 dimensions, not 1 to 65536"),
    ("dims", -1, "it has -1 dimensions, not 1 to 65536"),
    ("dims", 70000, "it has 70000 dimensions, not 1 to 65536"),
    ("dims", 3, "it has 3 dimensions, the table has 2"),
    ("dims", b"\x01", "its dims is of type blob, not integer"),
    ("dims", "two", "its dims is of type text, not integer"),
    ("dims", 2.5, "its dims is of type real, not integer"),
    ("capacity", 0, "it has room for 0 rows, not 1 to 247"),
    ("capacity", 1 << 40, "it has room for 1099511627776 rows, not 1 to 247"),
    ("capacity", b"", "its capacity is of type blob, not integer"),
    ("count", -1, "it holds -1 rows in room for 16"),
    ("count", 17, "it holds 17 rows in room for 16"),
    ("count", "ten", "its count is of type text, not integer"),
]


@pytest.mark.parametrize(
    "column,value,problem", BLOCK_DAMAGE, ids=[str(d[:2]) for d in BLOCK_DAMAGE]
)
def test_a_damaged_block_row_is_corrupt_naming_the_block(tmp_path, column, value, problem):
    """Every statement that reads the block fails with SQLITE_CORRUPT and one message; the
    caller's open transaction and its own write survive; both checks report the same line."""
    conn = make(tmp_path / "v.db")
    message = f"t: block 1 is damaged: {problem}"
    conn.execute(f"update t_blocks set {column} = ?", (value,))
    conn.execute("begin; insert into other values (1)")
    for sql in STATEMENTS:
        with pytest.raises(apsw.CorruptError, match="^" + re.escape(message) + "$"):
            conn.execute(sql).fetchall()
        assert in_transaction(conn), sql
    assert conn.execute("select count(*) from other").fetchone() == (1,)
    conn.execute("commit")
    assert checks(conn) == ([(message,)], [(message,)])
    conn.close()
    # a fresh connection (a new process's view of the file) says the same
    conn = connect(tmp_path / "v.db")
    with pytest.raises(apsw.CorruptError, match=re.escape(message)):
        conn.execute(KNN).fetchall()
    assert checks(conn) == ([(message,)], [(message,)])


def test_repairing_the_row_gives_the_same_answers_again(tmp_path):
    conn = make(tmp_path / "v.db")
    want = conn.execute(KNN).fetchall()
    conn.execute("update t_blocks set dims = 0")
    with pytest.raises(apsw.CorruptError):
        conn.execute(KNN).fetchall()
    conn.execute("update t_blocks set dims = 2")
    assert conn.execute(KNN).fetchall() == want
    assert checks(conn) == ([("ok",)], [("ok",)])


R = "t: block 1 is damaged: "
# (damage, the statement that meets it, its message, what integrity_check says, quick_check)
ROW_DAMAGE = [
    (
        "update t_codes set data = x'00'",
        KNN,
        R + "its codes row has 1 bytes, not 528",
        None,
        None,
    ),
    (
        "update t_codes set data = 5",
        KNN,
        R + "its codes row 1 is missing or unreadable: cannot open value of type integer",
        None,
        None,
    ),
    (
        "delete from t_codes",
        KNN,
        R + "its codes row 1 is missing or unreadable: no such rowid: 1",
        None,
        None,
    ),
    (
        "delete from t_vectors",
        "select rowid, e from t",
        R + "its vectors row 256 is missing or unreadable: no such rowid: 256",
        None,
        "ok",
    ),
    (
        "update t_vectors set data = substr(data, 1, 8)",
        "select rowid, e from t",
        R + "its vectors row 256 has 8 bytes, not 1976",
        None,
        "ok",
    ),
    (
        "update t_vectors set data = x'0000c07f' || substr(data, 5)",
        KNN,
        R + "the vector of row 1 is not finite",
        None,
        "ok",
    ),
    (
        "update t_rowids set slot = 99 where id = 3",
        "select rowid, e from t",
        R + "row 3 is in its slot 99, not 0 to 9",
        R + "row 3 is in its slot 2, its location says otherwise",
        "ok",
    ),
    (
        "update t_rowids set slot = -1 where id = 3",
        "delete from t where rowid = 3",
        R + "row 3 is in its slot -1, not 0 to 9",
        R + "row 3 is in its slot 2, its location says otherwise",
        "ok",
    ),
    # a location that is not two integers: SQLite reads x'32' as 2, row 3's own slot, so a
    # reader that did not look at the type would find the row where it is (found by fuzz_shadow)
    (
        "update t_rowids set slot = x'32' where id = 3",
        "select rowid, e from t",
        "t: row 3 is damaged: its slot is of type blob, not integer",
        None,
        "ok",
    ),
    (
        "update t_rowids set block = '1x' where id = 3",
        KNN,
        "t: row 3 is damaged: its block is of type text, not integer",
        None,
        "ok",
    ),
    (
        "update t_rowids set slot = 2.5 where id = 3",
        "delete from t where rowid = 3",
        "t: row 3 is damaged: its slot is of type real, not integer",
        None,
        "ok",
    ),
    (
        "update t_rowids set block = 7 where id = 3",
        "insert or replace into t(rowid, e, p, m, s) values (3, '[0,1]', 'a', 3, 'x')",
        "t: row 3 is in block 7, which is missing",
        R + "row 3 is in its slot 2, its location says otherwise",
        "ok",
    ),
]


@pytest.mark.parametrize(
    "damage,sql,message,integrity,quick", ROW_DAMAGE, ids=[d[0] for d in ROW_DAMAGE]
)
def test_damaged_codes_vectors_and_rowids(tmp_path, damage, sql, message, integrity, quick):
    """None: the same line as the statement's. quick_check reads only the blocks and their
    codes rows, so it passes over damage in T_vectors and T_rowids."""
    conn = make(tmp_path / "v.db")
    conn.execute(damage)
    conn.execute("begin; insert into other values (1)")
    with pytest.raises(apsw.CorruptError, match="^" + re.escape(message) + "$"):
        conn.execute(sql).fetchall()
    assert in_transaction(conn)
    assert conn.execute("select count(*) from other").fetchone() == (1,)
    conn.execute("commit")
    integrity = integrity or message
    assert checks(conn) == ([(integrity,)], [(quick or integrity,)])


def test_a_location_read_as_another_rows_is_damage_not_that_rows_answer(tmp_path):
    """Row 3's slot made x'30', which SQLite reads as 0, row 1's slot: a query whose metadata
    condition selects row 3 alone would score row 1 in its place (row 1 does not meet it)."""
    conn = make(tmp_path / "v.db")
    conn.execute("update t set s = 'z' where rowid = 3")
    sql = "select rowid from t where e match '[1,0]' and k = 3 and s = 'z'"
    assert conn.execute(sql).fetchall() == [(3,)]
    conn.execute("update t_rowids set slot = x'30' where id = 3")
    with pytest.raises(apsw.CorruptError, match="^t: row 3 is damaged: its slot is of type blob"):
        conn.execute(sql).fetchall()


# -- issue 34, item 2: damage that leaves every row its length ------------------------------

V = "vectors: block 1 is damaged: "
B2 = "vectors: block 2 is damaged: "
B3 = "vectors: block 3 is damaged: "
SUM = "its records, count or partition do not match its checksum"
DOCS = "and model_id = 'm' and kind = 'document'"
VKNN = "select rowid, score from vectors where vector match ? and k = 3 " + DOCS
VSCAN = "select count(*) from vectors"


@pytest.fixture(scope="module")
def hybrid_template(tmp_path_factory):
    """A table shaped as hybridsql's `vectors` (float[], partitions model_id and kind): 600 rows
    of 384 dimensions in blocks 1, 2 (255 rows each) and 3 (90 rows, room for 128)."""
    path = tmp_path_factory.mktemp("hybrid") / "template.db"
    conn = connect(path)
    conn.execute(
        "create virtual table vectors using vector_index(chunk_id integer primary key,"
        " vector float[], model_id text partition key, kind text partition key)"
    )
    rng = np.random.default_rng(1)
    with conn:
        conn.executemany(
            "insert into vectors(chunk_id, vector, model_id, kind) values (?, ?, 'm', 'document')",
            [(i, rng.standard_normal(384).astype(np.float32).tobytes()) for i in range(1, 601)],
        )
    conn.execute("create table other(x)")
    conn.close()
    return path


@pytest.fixture
def hybrid(hybrid_template, tmp_path):
    path = tmp_path / "v.db"
    shutil.copy(hybrid_template, path)
    return path


QUERY = np.random.default_rng(5).standard_normal(384).astype(np.float32).tobytes()
# (the damage, what a k-nearest query of the documents says, a scan, integrity_check)
SAME_LENGTH = [
    ("update vectors_codes set data = zeroblob(length(data))", V + SUM, None, V + SUM),
    ("update vectors_codes set data = randomblob(length(data))", V + SUM, None, V + SUM),
    (
        "update vectors_blocks set count = 10 where id = 1",
        V + SUM,
        V + "row 11 is in its slot 10, not 0 to 9",
        V + SUM,
    ),
    (
        "update vectors_blocks set count = 0 where id = 3",
        "vectors: block 3 is damaged: it holds 0 rows in room for 255",
        "vectors: block 3 is damaged: row 511 is in its slot 0, not 0 to -1",
        "vectors: block 3 is damaged: it holds 0 rows in room for 255",
    ),
    (
        "update vectors_blocks set dims = 3 where id = 1",
        V + "it has room for 255 rows, not 1 to 169",
        V + "it has room for 255 rows, not 1 to 169",
        V + "it has room for 255 rows, not 1 to 169",
    ),
    (
        "update vectors_blocks set dims = 200 where id = 3",
        "vectors: block 3 is damaged: its codes row has 102000 bytes, not 55080",
        None,
        "vectors: block 3 is damaged: it follows a block of its partition that is not full or has"
        " other dimensions",
    ),
    (
        "update vectors_vectors set data = data || x'00000000' where id = 256",
        None,
        None,
        V + "its vectors row 256 has 4612 bytes, not 4608",
    ),
    (
        "update vectors_codes set data = data || x'0000000000000000' where id = 1",
        V + "its codes row has 102008 bytes, not 102000",
        None,
        V + "its codes row has 102008 bytes, not 102000",
    ),
    (
        "delete from vectors_blocks",
        "vectors: its rows have locations, but it has no block",
        "vectors: row 1 is in block 1, which is missing",
        "vectors: 600 rows have a location, the blocks hold 0",
    ),
    ("update vectors_blocks set p1 = 'memory' where id = 1", None, None, V + SUM),
]


@pytest.mark.parametrize("damage,knn,scan,integrity", SAME_LENGTH, ids=[d[0] for d in SAME_LENGTH])
def test_damage_of_the_same_length_is_corrupt_never_an_answer(hybrid, damage, knn, scan, integrity):
    """Each of the issue's changes: a query that reads the damaged rows fails with
    SQLITE_CORRUPT naming the table and block (before, the first two answered rowid 0 three
    times, or random rowids; a lowered count answered from the rows left; a partition changed
    lost documents), the caller's transaction survives, and both checks report it (before,
    integrity_check said ok to a partition changed). None: the statement does not read the
    damaged rows, and answers."""
    plain = apsw.Connection(str(hybrid))
    plain.execute(damage)
    plain.close()
    conn = connect(hybrid)
    conn.execute("begin; insert into other values (1)")
    for sql, message in ((VKNN, knn), (VSCAN, scan)):
        if message is None:
            conn.execute(sql, (QUERY,) if "?" in sql else ()).fetchall()
            continue
        with pytest.raises(apsw.CorruptError, match="^" + re.escape(message) + "$"):
            conn.execute(sql, (QUERY,) if "?" in sql else ()).fetchall()
        assert in_transaction(conn)
    assert conn.execute("select count(*) from other").fetchone() == (1,)
    conn.execute("commit")
    assert conn.execute("pragma integrity_check").fetchall() == [(integrity,)]
    assert conn.execute("pragma quick_check").fetchall()[0][0] in (integrity, "ok")


def test_a_partition_value_changed_is_met_by_the_queries_of_that_partition(hybrid):
    """A block moved to another partition (documents to memories) is found by every query that
    reads it: the new partition's, and one of every partition."""
    plain = apsw.Connection(str(hybrid))
    plain.execute("update vectors_blocks set p1 = 'memory' where id = 1")
    plain.close()
    conn = connect(hybrid)
    for where in ("and kind = 'memory'", ""):
        sql = f"select rowid from vectors where vector match ? and k = 3 {where}"
        with pytest.raises(apsw.CorruptError, match="^" + re.escape(V + SUM) + "$"):
            conn.execute(sql, (QUERY,)).fetchall()


def swap_vectors(path, group, a, b, d=384):
    """Swaps the float32 vectors of slots a and b of a T_vectors group: every byte still one of
    the table's vectors, each in another row's place."""
    plain = apsw.Connection(str(path))
    (data,) = plain.execute("select data from vectors_vectors where id = ?", (group,)).fetchone()
    rows = bytearray(data)
    x, y = rows[4 * d * a : 4 * d * (a + 1)], rows[4 * d * b : 4 * d * (b + 1)]
    rows[4 * d * a : 4 * d * (a + 1)], rows[4 * d * b : 4 * d * (b + 1)] = y, x
    plain.execute("update vectors_vectors set data = ? where id = ?", (bytes(rows), group))
    plain.close()


def best(path):
    """The best row of VKNN on an intact copy, and its block and slot."""
    conn = connect(path)
    (rowid, _), *_ = conn.execute(VKNN, (QUERY,)).fetchall()
    block, slot = conn.execute(
        "select block, slot from vectors_rowids where id = ?", (rowid,)
    ).fetchone()
    conn.close()
    return rowid, block, slot


def test_a_vector_swapped_with_another_is_corrupt_not_scored(hybrid):
    """A row's float32 vector replaced by another row's (same length, finite, a real vector):
    the row is rescored from it only after its record is checked against it."""
    rowid, block, slot = best(hybrid)
    group = block * 256 + slot // 3  # 3 rows a group at 4 KiB pages
    swap_vectors(hybrid, group, slot % 3, (slot + 1) % 3)
    conn = connect(hybrid)
    message = (
        f"vectors: block {block} is damaged: the record of row {rowid} does not match its vector"
    )
    with pytest.raises(apsw.CorruptError, match="^" + re.escape(message) + "$"):
        conn.execute(VKNN, (QUERY,)).fetchall()
    assert (
        conn.execute("pragma integrity_check")
        .fetchone()[0]
        .startswith(f"vectors: block {block} is damaged: the record of row ")
    )


@pytest.mark.parametrize(
    "damage",
    [
        "delete from vectors_rowids where id = ?",
        "update vectors_rowids set slot = 200 where id = ?",
    ],
)
def test_a_rowid_is_answered_only_where_its_location_says(hybrid, damage):
    rowid, block, slot = best(hybrid)
    plain = apsw.Connection(str(hybrid))
    plain.execute(damage, (rowid,))
    plain.close()
    conn = connect(hybrid)
    message = (
        f"vectors: block {block} is damaged: row {rowid} is in its slot {slot}, its location says"
        " otherwise"
    )
    with pytest.raises(apsw.CorruptError, match="^" + re.escape(message) + "$"):
        conn.execute(VKNN, (QUERY,)).fetchall()


def test_a_cached_block_answers_only_what_the_file_held_when_it_passed(hybrid):
    """A connection keeps the blocks it read twice, each checked against its checksum when read.
    The file's records are then overwritten with bytes of the same length and the nonce left
    alone: that connection answers from its copy, the table's true rows (it reads no T_codes
    row), while a new connection, which reads them, and integrity_check say what is wrong."""
    conn = connect(hybrid)
    want = conn.execute(VKNN, (QUERY,)).fetchall()
    assert conn.execute(VKNN, (QUERY,)).fetchall() == want  # read twice: kept
    plain = apsw.Connection(str(hybrid))
    plain.execute("update vectors_codes set data = zeroblob(length(data))")
    plain.close()
    assert conn.execute(VKNN, (QUERY,)).fetchall() == want
    with pytest.raises(apsw.CorruptError, match="^" + re.escape(V + SUM) + "$"):
        connect(hybrid).execute(VKNN, (QUERY,)).fetchall()
    assert conn.execute("pragma integrity_check").fetchall() == [(V + SUM,)]


def damaged_codes(path):
    """Block 1's T_codes row with 64 bytes in the middle of its records inverted: the same
    length, its nonce (the checksum) left as it was. Also the bytes it had there."""
    plain = apsw.Connection(str(path))
    (data,) = plain.execute("select data from vectors_codes where id = 1").fetchone()
    plain.close()
    at = len(data) // 2
    was = data[at : at + 64]
    return data[:at] + bytes(255 - b for b in was) + data[at + 64 :], was


DAMAGE_CODES = "update vectors_codes set data = ? where id = 1"


def damage_block_1(path, how):
    """Damages block 1's records (damaged_codes) by another connection of this process, by
    another process, or by writing the bytes into the file itself, under SQLite: no journal, no
    change counter, as a disk's bit rot would."""
    data, was = damaged_codes(path)
    if how == "another connection":
        plain = apsw.Connection(str(path))
        plain.execute(DAMAGE_CODES, (data,))
        plain.close()
    elif how == "another process":
        script = (
            "import sys, apsw; c = apsw.Connection(sys.argv[1]);"
            f" c.execute({DAMAGE_CODES!r}, (sys.stdin.buffer.read(),))"
        )
        subprocess.run([sys.executable, "-c", script, str(path)], input=data, check=True)
    else:
        with open(path, "r+b") as f:
            content = f.read()
            assert content.count(was) == 1  # 64 bytes of records: found once, in block 1
            f.seek(content.index(was))
            f.write(bytes(255 - b for b in was))


@pytest.mark.parametrize("how", ["another connection", "another process", "the file's bytes"])
def test_a_block_damaged_after_a_connection_checked_it_is_corrupt_there_too(hybrid, how):
    """A block that passed its check in a connection's first query is read and checked again by
    that connection's next query (only a block read twice is kept, as it was when it passed:
    test_a_cached_block_answers_only_what_the_file_held_when_it_passed): damage written
    since, by another connection or process or into the file under SQLite, is SQLITE_CORRUPT,
    in that connection and in a new one, never an answer from the damaged records."""
    conn = connect(hybrid)
    conn.execute(VKNN, (QUERY,)).fetchall()  # block 1 read and checked once
    damage_block_1(hybrid, how)
    for reader in (conn, connect(hybrid)):
        with pytest.raises(apsw.CorruptError, match="^" + re.escape(V + SUM) + "$"):
            reader.execute(VKNN, (QUERY,)).fetchall()


@pytest.mark.parametrize("how", ["another connection", "another process", "the file's bytes"])
def test_a_block_damaged_between_connections_is_corrupt(hybrid, how):
    """The same damage before a connection opens: its first query, which reads every block of
    the documents from the file, fails on block 1's checksum."""
    damage_block_1(hybrid, how)
    with pytest.raises(apsw.CorruptError, match="^" + re.escape(V + SUM) + "$"):
        connect(hybrid).execute(VKNN, (QUERY,)).fetchall()
    assert connect(hybrid).execute("pragma integrity_check").fetchall() == [(V + SUM,)]


def as_format_2(path):
    """Makes the table what hybridsql before format 3 left: random nonces, format 2."""
    plain = apsw.Connection(str(path))
    plain.execute("update vectors_blocks set nonce = random()")
    plain.execute("update vectors_info set value = 2 where key = 'format'")
    plain.close()


def test_a_format_2_table_is_read_and_becomes_format_3_at_its_first_write(hybrid, tmp_path):
    """Its random nonces are not checksums: it is read as before (no false damage), its rows
    scored are checked all the same (zeroed records: CORRUPT, not rowid 0), and the first write
    transaction sums every block; then the checksums find what only they can."""
    as_format_2(hybrid)
    shutil.copy(hybrid, tmp_path / "zeroed.db")
    plain = apsw.Connection(str(tmp_path / "zeroed.db"))
    plain.execute("update vectors_codes set data = zeroblob(length(data))")
    plain.close()
    with pytest.raises(
        apsw.CorruptError, match=r"^vectors: block \d is damaged: the record of row 0"
    ):
        connect(tmp_path / "zeroed.db").execute(VKNN, (QUERY,)).fetchall()
    conn = connect(hybrid)
    want = conn.execute(VKNN, (QUERY,)).fetchall()
    assert checks(conn) == ([("ok",)], [("ok",)])
    nonces = conn.execute("select nonce from vectors_blocks order by id").fetchall()
    with conn:
        conn.execute("delete from vectors where rowid = 600")
    assert conn.execute("select value from vectors_info where key = 'format'").fetchone() == (3,)
    assert (
        conn.execute("select nonce from vectors_blocks where id < 3 order by id").fetchall()
        != (nonces[:2])
    )
    assert conn.execute(VKNN, (QUERY,)).fetchall() == want
    assert checks(conn) == ([("ok",)], [("ok",)])
    conn.execute("update vectors_blocks set count = 10 where id = 1")
    assert checks(conn) == ([(V + SUM,)], [(V + SUM,)])


def test_an_upgrade_rolled_back_leaves_format_2_readable(hybrid):
    """The write that upgrades is rolled back: the file is format 2 again, with its random
    nonces, and the connection that upgraded reads it as format 2 (no false damage)."""
    as_format_2(hybrid)
    conn = connect(hybrid)
    conn.execute("begin")
    conn.execute("delete from vectors where rowid = 600")
    assert conn.execute("select value from vectors_info where key = 'format'").fetchone() == (3,)
    conn.execute("rollback")
    assert conn.execute("select value from vectors_info where key = 'format'").fetchone() == (2,)
    assert len(conn.execute(VKNN, (QUERY,)).fetchall()) == 3
    assert checks(conn) == ([("ok",)], [("ok",)])


# Issue 34 item 5: the index's `vectors` damaged or from a newer hybridsql, every command.
INDEX_DAMAGE = {
    "newer storage format": "update vectors_info set value = 99 where key = 'format'",
    "dims of every block": "update vectors_blocks set dims = 3",
    "codes zeroed": "update vectors_codes set data = zeroblob(length(data))",
    "counts lowered": "update vectors_blocks set count = count - 1",
    "blocks deleted": "delete from vectors_blocks",
    "a partition changed": "update vectors_blocks set p1 = 'memory' where p1 = 'document'",
}
COMMANDS = (
    ["search", "deploy"],
    ["memory", "documents", "deploy"],
    ["stats"],
    ["index", EXAMPLES],
    ["memory", "add", "Deploys wait for the freeze to end"],
)
NEWER_LINE = (
    "hybridsql: {db} was made by a newer hybridsql (its vectors' storage format 99, this one"
    " reads 3); upgrade hybridsql to use it"
)
DAMAGED_LINE = (
    "hybridsql: {db} is damaged ({why}); restore it from a backup or recover it with"
    " `sqlite3 {db} .recover`"
)
SEARCH_SAYS = {
    "newer storage format": NEWER_LINE,
    "dims of every block": DAMAGED_LINE.replace(
        "{why}", "vectors: block {block} is damaged: its codes row has {n} bytes, not {m}"
    ),
    "codes zeroed": DAMAGED_LINE.replace("{why}", "vectors: block {block} is damaged: " + SUM),
    "counts lowered": DAMAGED_LINE.replace("{why}", "vectors: block {block} is damaged: " + SUM),
}


@pytest.mark.parametrize("damage", INDEX_DAMAGE)
def test_every_command_on_a_damaged_index_answers_one_line(example_db, tmp_path, damage):
    """Each command on a copy of an index whose vectors were damaged, or written by a newer
    hybridsql: its answer, or one line and exit code 1; never a traceback (a newer storage
    format was a traceback from every command, the dims of a damaged block from search). A
    search that reads the damaged blocks says which; a search of documents does not read
    a block moved to the memories, which integrity_check finds."""
    db = str(tmp_path / "damaged.db")
    shutil.copy(example_db, db)
    plain = apsw.Connection(db)
    plain.execute(INDEX_DAMAGE[damage])
    plain.close()
    for argv in COMMANDS:
        proc = run_hybridsql(*argv, "--db", db)
        assert "Traceback" not in proc.stdout + proc.stderr, (argv, proc.stderr)
        if proc.returncode:
            assert (proc.returncode, proc.stderr.count("\n")) == (1, 1), (argv, proc.stderr)
            assert proc.stderr.startswith("hybridsql: "), (argv, proc.stderr)
        if argv[0] == "search" and damage in SEARCH_SAYS:
            pattern = re.escape(SEARCH_SAYS[damage]).replace(re.escape("{db}"), re.escape(db))
            pattern = re.sub(r"\\\{(block|n|m)\\\}", r"\\d+", pattern)
            assert re.fullmatch(pattern, proc.stderr.rstrip("\n")), proc.stderr


# -- item 6: shadow tables dropped, renamed or replaced ---------------------------------------


def damage_shadow(conn, shadow, how):
    if how == "view":
        conn.execute(f"alter table t_{shadow} rename to t_{shadow}_real")
        conn.execute(f"create view t_{shadow} as select * from t_{shadow}_real")
    elif how == "drop":
        conn.execute(f"drop table t_{shadow}")
    else:
        conn.execute(f"alter table t_{shadow} rename to t_{shadow}_old")


@pytest.mark.parametrize("fresh", [False, True], ids=["same connection", "fresh connection"])
@pytest.mark.parametrize("how", ["view", "drop", "rename"])
@pytest.mark.parametrize("shadow", SHADOWS)
def test_drop_table_works_whatever_became_of_a_shadow_table(tmp_path, shadow, how, fresh):
    """DROP TABLE removes the table and whatever stands under its shadow tables' names (a view
    too); a renamed shadow table keeps its new name. The name is free again afterwards."""
    conn = make(tmp_path / "v.db")
    damage_shadow(conn, shadow, how)
    if fresh:
        conn.close()
        conn = connect(tmp_path / "v.db")
    conn.execute("drop table t")
    # what is left: `other`, and the renamed shadow table with its indexes
    renamed = {"view": f"t_{shadow}_real", "rename": f"t_{shadow}_old"}.get(how)
    left = {table for (table,) in conn.execute("select tbl_name from sqlite_schema")}
    assert left == {"other", renamed} - {None}
    conn.execute("create virtual table t using vector_index(e float[2])")
    conn.execute("insert into t(rowid, e) values (1, '[1,0]')")
    assert conn.execute(KNN).fetchall() == [(1, 1.0)]


@pytest.mark.parametrize("shadow", ["info", "blocks"])
def test_a_table_whose_shadow_tables_cannot_be_read_says_which(tmp_path, shadow):
    """A new connection reads T_info and T_blocks when it first meets the table: without one,
    every use of the table fails with the same line, and integrity_check reports it."""
    conn = make(tmp_path / "v.db")
    conn.execute(f"drop table t_{shadow}")
    conn.close()
    conn = connect(tmp_path / "v.db")
    message = f"vector_index: the shadow tables of t cannot be read: no such table: main.t_{shadow}"
    for sql in (*STATEMENTS, "alter table t rename to u"):
        with pytest.raises(apsw.CorruptError, match="^" + re.escape(message) + "$"):
            conn.execute(sql).fetchall()
    assert checks(conn) == ([(message,)], [(message,)])
    conn.execute("drop table t")
    assert conn.execute("select distinct tbl_name from sqlite_schema").fetchall() == [("other",)]


def shell(path, *commands):
    """Runs the stock sqlite3 shell on path after .load: (exit code, stderr, stdout)."""
    program = shutil.which("sqlite3")
    if program is None:
        pytest.fail("the sqlite3 shell is not installed (apt-get install sqlite3)")
    proc = subprocess.run(
        [program, str(path), f".load {hybridsql.loadable_path()}", *commands],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode, proc.stderr, proc.stdout


def test_the_stock_shell_drops_a_damaged_table_and_checks_it_from_3_44(tmp_path):
    """The stock shell (SQLite 3.40.1 on Debian 12) drops a damaged table too. Its
    integrity_check runs the module's check only from SQLite 3.44 on (xIntegrity): before that
    it says ok, which is why the checks above run on apsw's SQLite."""
    conn = make(tmp_path / "v.db")
    conn.execute("update t_blocks set dims = 0")
    version = tuple(map(int, shell(tmp_path / "v.db", "select sqlite_version()")[2].split(".")))
    message = "t: block 1 is damaged: it has 0 dimensions, not 1 to 65536"
    want = message if version >= (3, 44) else "ok"
    assert shell(tmp_path / "v.db", "pragma integrity_check") == (0, "", want + "\n")
    damage_shadow(conn, "rowids", "view")
    conn.close()
    tables = "select distinct tbl_name from sqlite_schema order by 1"
    assert shell(tmp_path / "v.db", "drop table t", tables) == (0, "", "other\nt_rowids_real\n")


# -- item 14: interrupted queries --------------------------------------------------------------

D = 16
QUERIES = (
    "select rowid, score from t where e match ? and k = 10",
    "select rowid, score, m, s from t where e match ? and k = 10 and m = 3",
    "select rowid, score, e from t where e match ? and k = 10 and p = 'b' and s = 'x'",
)


@pytest.fixture
def big(tmp_path):
    """A file with 3,000 rows of D dimensions in two partitions: a k-nearest query on it opens
    blob handles on many T_codes and T_vectors rows, where an interrupt can land."""
    conn = connect(tmp_path / "big.db")
    conn.execute(f"create virtual table t using vector_index(e float[{D}], {DECLARATION[12:]})")
    rng = np.random.default_rng(3)
    with conn:
        conn.executemany(
            "insert into t(rowid, e, p, m, s) values (?, ?, ?, ?, 'x')",
            [
                (i, rng.standard_normal(D).astype(np.float32).tobytes(), "ab"[i % 2], i % 7)
                for i in range(3000)
            ],
        )
    q = rng.standard_normal(D).astype(np.float32).tobytes()
    yield tmp_path / "big.db", conn, q
    conn.close()


def steps(conn, sql, params=()):
    """The progress handler's calls (one per VM instruction) that sql takes, nested statements
    included."""
    calls = [0]

    def count():
        calls[0] += 1
        return False

    conn.set_progress_handler(count, 1)
    conn.execute(sql, params).fetchall()
    conn.set_progress_handler(None)
    return calls[0]


def interrupted_at(conn, n, how, sql, params=()):
    """Runs sql, stopped at the n-th instruction: the progress handler returns True (how
    "handler") or calls conn.interrupt() (how "interrupt", as Datasette's time limit and another
    thread do). The rows, or the error."""
    calls = [0]

    def handler():
        calls[0] += 1
        if calls[0] < n:
            return False
        if how == "interrupt":
            conn.interrupt()
            return False
        return True

    conn.set_progress_handler(handler, 1)
    try:
        return conn.execute(sql, params).fetchall()
    except apsw.Error as e:
        return e
    finally:
        conn.set_progress_handler(None)


@pytest.mark.parametrize("how", ["handler", "interrupt"])
def test_an_interrupted_query_is_an_interrupt_and_the_index_answers_after(big, how):
    """Stopped at 60 points spread over the whole query (the block list, the blob handles on
    T_codes and T_vectors, the rescoring, a column's row): each run gives its rows or
    SQLITE_INTERRUPT, never CORRUPT; afterwards the same answers and both checks ok."""
    path, conn, q = big
    want = [conn.execute(sql, (q,)).fetchall() for sql in QUERIES]
    stopped = 0
    for sql, rows in zip(QUERIES, want, strict=True):
        total = steps(conn, sql, (q,))
        for n in sorted({1 + total * i // 60 for i in range(60)}):
            got = interrupted_at(conn, n, how, sql, (q,))
            if isinstance(got, apsw.Error):
                assert type(got) is apsw.InterruptError, (n, got)
                assert str(got) in ("interrupted", "t: interrupted"), (n, got)
                stopped += 1
            else:
                assert got == rows
        assert conn.execute(sql, (q,)).fetchall() == rows
    assert stopped > 60  # most points land inside the query
    assert checks(conn) == ([("ok",)], [("ok",)])
    # a new connection interrupted while it first reads the table's shadow tables
    fresh = connect(path)
    got = interrupted_at(fresh, 1, how, QUERIES[0], (q,))
    assert type(got) is apsw.InterruptError and str(got) in (
        "interrupted",
        "vector_index: t: interrupted",
    )
    assert fresh.execute(QUERIES[0], (q,)).fetchall() == want[0]


PYSQLITE3_INTERRUPT = r"""
import sys
import pysqlite3.dbapi2 as sqlite3
from hybridsql.db import extension
c = sqlite3.connect(sys.argv[1])
assert extension.load(c) == "extension"
q = bytes.fromhex(sys.argv[2])
sql = "select rowid, score, e from t where e match ? and k = 10"
want = c.execute(sql, (q,)).fetchall()
calls = [0]
def count():
    calls[0] += 1
    return 0
c.set_progress_handler(count, 1)
c.execute(sql, (q,)).fetchall()
total, outcomes = calls[0], set()
for n in sorted({1 + total * i // 60 for i in range(60)}):
    calls[0] = 0
    def stop():
        calls[0] += 1
        if calls[0] >= n:
            c.interrupt()
        return 0
    c.set_progress_handler(stop, 1)
    try:
        assert c.execute(sql, (q,)).fetchall() == want
        outcomes.add("rows")
    except sqlite3.Error as e:
        outcomes.add(f"{type(e).__name__} {e.sqlite_errorname}")
    c.set_progress_handler(None, 1)
assert c.execute(sql, (q,)).fetchall() == want
print(sorted(outcomes))
"""


def test_an_interrupt_through_pysqlite3_is_an_interrupt(big):
    """The same through pysqlite3 (what sqlite-utils and Datasette get where it is installed):
    an OperationalError of SQLITE_INTERRUPT, not a DatabaseError of SQLITE_CORRUPT (in a
    subprocess: one process, one SQLite library for the extension)."""
    path, conn, q = big
    conn.close()
    proc = subprocess.run(
        [sys.executable, "-c", PYSQLITE3_INTERRUPT, str(path), q.hex()],
        cwd=path.parent,  # not the checkout, whose hybridsql/ is not built
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == "['OperationalError SQLITE_INTERRUPT', 'rows']\n"


@pytest.mark.parametrize("check", ["integrity_check", "quick_check"])
def test_an_interrupted_integrity_check_is_an_interrupt_not_a_report(big, check):
    _, conn, _ = big
    total = steps(conn, f"pragma {check}")
    for n in sorted({1 + total * i // 20 for i in range(20)}):
        got = interrupted_at(conn, n, "handler", f"pragma {check}")
        assert got == [("ok",)] or type(got) is apsw.InterruptError, (n, got)


def test_the_mcp_server_remembers_damage_but_not_an_interrupt(big):
    """The MCP server's guard stops serving a damaged database for good; an interrupted search
    (SQLITE_INTERRUPT, not one of DAMAGED) is an error of that call only."""
    path, conn, q = big
    guard = Guard(str(path))

    def search():
        return conn.execute(QUERIES[0], (q,)).fetchall()

    half, calls = steps(conn, QUERIES[0], (q,)) // 2, [0]

    def stop():
        calls[0] += 1
        return calls[0] >= half

    conn.set_progress_handler(stop, 1)
    with pytest.raises(apsw.InterruptError):
        guard.call(search)
    conn.set_progress_handler(None)
    assert guard.broken is None
    assert len(guard.call(search)) == 10
    conn.execute("update t_blocks set dims = 0 where id = 1")
    message = (
        f"{path} is damaged (t: block 1 is damaged: it has 0 dimensions, not 1 to 65536); restore"
        f" it from a backup or recover it with `sqlite3 {path} .recover`"
    )
    for _ in range(2):  # then every call says the same
        with pytest.raises(ToolError, match="^" + re.escape(message) + "$"):
            guard.call(search)


# -- item 5: shadow rows changed at random (fuzz/fuzz_shadow.py) -------------------------------


def test_shadow_rows_changed_behind_the_tables_back(tmp_path):
    """fuzz/fuzz_shadow.py's requirements over seeded inputs (HYBRIDSQL_SHADOW_SEEDS, default
    150; the fuzzer runs longer): no crash, every error SQLITE_CORRUPT naming the block or shadow
    table (or one of the harness's ALLOWED statement errors), the caller's transaction intact,
    and integrity_check reporting what the statements met."""
    spec = importlib.util.spec_from_file_location(
        "fuzz_shadow", os.path.join(ROOT, "fuzz", "fuzz_shadow.py")
    )
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    template = str(tmp_path / "template.db")
    harness.make_template(template)
    seeds = int(os.environ.get("HYBRIDSQL_SHADOW_SEEDS", "150"))
    damaged = 0
    for seed in range(seeds):
        source = harness.Source(rng=random.Random(seed))
        damaged += bool(harness.check(template, str(tmp_path / "work.db"), source))
    assert damaged >= seeds // 4  # the changes reach the statements, not only the file


# -- issue 34, item 2: the same damage met by the numpy and pure-Python backends ---------------

READER_DAMAGE = [
    ("update vectors_codes set data = zeroblob(length(data)) where id = 1", V + SUM),
    ("update vectors_codes set data = randomblob(length(data)) where id = 2", B2 + SUM),
    ("update vectors_blocks set count = 10 where id = 1", V + SUM),
    ("update vectors_blocks set p1 = 'memory' where id = 1", V + SUM),
    ("update vectors_blocks set count = 0 where id = 3", B3 + "it holds 0 rows in room for 255"),
    (
        "update vectors_blocks set count = 300 where id = 3",
        B3 + "it holds 300 rows in room for 255",
    ),
    (
        "update vectors_blocks set capacity = 999 where id = 3",
        B3 + "it has room for 999 rows, not 1 to 256",
    ),
    ("update vectors_blocks set dims = 0 where id = 1", V + "it has 0 dimensions, not 1 to 65536"),
    (
        "update vectors_blocks set dims = 3 where id = 1",
        V + "its codes row has 102000 bytes, not 6120",
    ),
    (
        "update vectors_blocks set count = 'ten' where id = 1",
        V + "its count is of type text, not integer",
    ),
    (
        "update vectors_codes set data = data || x'0000000000000000' where id = 1",
        V + "its codes row has 102008 bytes, not 102000",
    ),
    ("delete from vectors_codes where id = 1", V + "its codes row is missing"),
    (
        "update vectors_vectors set data = data || x'00000000' where id = 256",
        V + "its vectors row 256 has 4612 bytes, not a whole number of 384-dimension vectors",
    ),
    (
        "update vectors_vectors set data = substr(data, 1, 3072) where id = 257",
        V + "its vectors row 257 has 3072 bytes, its row 256 has 4608",
    ),
    ("delete from vectors_vectors where id = 257", V + "its vectors row 257 is missing"),
]


def reader_topk(path, math_, where=None):
    from hybridsql.db.vectors import VectorReader

    conn = apsw.Connection(str(path))
    return VectorReader(conn, "vectors", math_=math_).topk(QUERY, 3, where)


@pytest.mark.parametrize("math_", ["numpy", "python"])
@pytest.mark.parametrize("damage,message", READER_DAMAGE, ids=[d[0] for d in READER_DAMAGE])
def test_the_fallback_reader_refuses_a_damaged_block(hybrid, math_, damage, message):
    """VectorReader (where the extension cannot load) checks what the extension checks of a
    block it reads: its row's numbers, its codes and vectors rows' lengths, its checksum
    (format 3). Before, it answered rowid 0 or random rowids from zeroed or random records,
    from the rows left when the count was lowered, without a moved block, or failed in numpy."""
    intact = reader_topk(hybrid, math_)
    plain = apsw.Connection(str(hybrid))
    plain.execute(damage)
    plain.close()
    with pytest.raises(hybridsql.DatabaseError, match="^" + re.escape(message) + "$"):
        reader_topk(hybrid, math_)
    assert len(intact) == 3


@pytest.mark.parametrize("math_", ["numpy", "python"])
@pytest.mark.parametrize(
    "damage",
    [
        "delete from vectors_rowids where id = ?",
        "update vectors_rowids set slot = 200 where id = ?",
    ],
)
def test_the_fallback_reader_answers_a_row_only_where_its_location_says(hybrid, math_, damage):
    rowid, block, slot = best(hybrid)
    assert reader_topk(hybrid, math_)[0][0] == rowid
    plain = apsw.Connection(str(hybrid))
    plain.execute(damage, (rowid,))
    plain.close()
    message = (
        f"vectors: block {block} is damaged: row {rowid} is in its slot {slot}, its location says"
        " otherwise"
    )
    with pytest.raises(hybridsql.DatabaseError, match="^" + re.escape(message) + "$"):
        reader_topk(hybrid, math_)


# HYBRIDSQL_SIMD forces generic or sse2; any other value leaves the CPU's own path (avx2, neon)
X86 = platform.machine().lower() in ("x86_64", "amd64")
SIMD_PATHS = ["generic"] + (["sse2", "avx2"] if X86 else [platform.machine()])


@pytest.mark.parametrize("simd", SIMD_PATHS)
def test_every_simd_path_writes_the_checksum_numpy_computes(tmp_path, simd):
    """Each SIMD path's checksum (a process forced onto it, HYBRIDSQL_SIMD; the CPU's own path
    otherwise, which is sse2 on an x86-64 without AVX2) is the one hybridsql.db.vectors computes in numpy, for blocks of
    every fill, numeric metadata and partition values of every type: so a file written on one
    path reads on every other, and the fallback reader checks it. The same path verifies every
    block a fresh connection's query reads (whole blocks, many chunks summed at once)."""
    from hybridsql.db.vectors import block_checksum

    path = tmp_path / "simd.db"
    script = (
        "import sys, numpy as np, hybridsql\n"
        "conn = hybridsql.connect(sys.argv[1], backend='extension')\n"
        "conn.execute('create virtual table t using vector_index(e float[], p text partition key,"
        " q real partition key, m integer, r real, s text)')\n"
        "rng = np.random.default_rng(2)\n"
        "parts = [('a', 2.5), ('é', 3), (None, None), ('', -1)]\n"
        "with conn:\n"
        "    for i in range(1, 2400):\n"
        "        d = (5, 67, 300, 8)[i % 4]\n"
        "        conn.execute('insert into t(rowid, e, p, q, m, r, s) values (?, ?, ?, ?, ?, ?, ?)',"
        " (i, rng.standard_normal(d).astype('<f4').tobytes(), *parts[i % 4], i, i / 3, 'x'))\n"
        "    conn.execute('delete from t where rowid % 7 = 0')\n"
        "    conn.execute('update t set m = -1 where rowid % 5 = 0')\n"
        "conn.close()\n"
        # A fresh connection on the same path reads every block, so its checksum is verified there
        "conn = hybridsql.connect(sys.argv[1], backend='extension')\n"
        "for d, (p, q) in zip((5, 67, 300, 8), parts):\n"
        "    if p is not None:\n"
        "        v = np.ones(d, '<f4').tobytes()\n"
        "        assert conn.execute('select count(*) from t where e match ? and k = 3000 and p = ?"
        " and q = ?', (v, p, q)).fetchone()[0] > 300\n"
    )
    env = {**os.environ, "HYBRIDSQL_SIMD": simd}
    # From the file's folder, not the checkout, whose hybridsql/ may have no library.
    subprocess.run(
        [sys.executable, "-c", script, str(path)], env=env, check=True, timeout=120, cwd=path.parent
    )
    conn = apsw.Connection(str(path))
    rows = conn.execute(
        "select b.id, dims, capacity, count, p0, p1, nonce, c.data from t_blocks b"
        " join t_codes c using (id)"
    ).fetchall()
    assert len(rows) >= 8 and all(len(r[-1]) % 256 for r in rows)  # a shorter last chunk too
    for block_id, dims, capacity, count, p, q, nonce, codes in rows:
        assert block_checksum(block_id, dims, capacity, count, [p, q], codes) == nonce, block_id
    conn.close()
    assert connect(path).execute("pragma integrity_check").fetchall() == [("ok",)]
