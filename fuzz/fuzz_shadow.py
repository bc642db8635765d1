"""atheris harness: vector_index on a file whose shadow tables were changed behind its back.

Each input copies a small index (table t: 4 dimensions, a text partition column, an integer and
a text metadata column, 700 rows in three partitions, blocks full and growing), changes one to
three shadow rows with plain SQL (a value of T_blocks, T_rowids or T_info set to an edge value
or another type; a T_codes or T_vectors BLOB cut, lengthened, with bytes changed, or made
another type; a row deleted or added), then opens it with the extension and, inside a
transaction that has written a row of its own, runs every kind of statement: k-nearest queries
with each kind of filter, scans, point reads, inserts, updates of each column, deletes.

It requires: no crash and no memory error (the extension is built with the sanitizers when
HYBRIDSQL_SANITIZE=1 installed it); every rowid a k-nearest query answers is one T_rowids holds;
every error is SQLITE_CORRUPT naming the table and the block
or shadow table (or one of the few statement errors damage can lead to, listed in ALLOWED);
the caller's transaction and its own row survive every error; and once a statement has met the
damage, `pragma integrity_check` reports a problem (asked then: a later statement may rightly
replace or delete the damaged row, as `insert or replace` of a row whose metadata has the wrong
type does).

tests/test_vector_damage.py runs the same check over a few hundred seeded inputs. Run the
fuzzer: see fuzz/README.md.
"""

import os
import random
import re
import shutil
import sys
import tempfile

import apsw

import hybridsql

D = 4
SHADOWS = ("info", "blocks", "codes", "vectors", "rowids")
# fmt: off
INTS = [0, 1, -1, 2, 3, 4, 5, 15, 16, 17, 31, 32, 33, 100, 246, 247, 248, 255, 256, 257, 65536,
        65537, 2**31 - 1, 2**31, 2**32, 2**62, 2**63 - 1, -(2**63)]
# fmt: on
QUERY = "[1, 0.5, -0.25, 0.125]"
STATEMENTS = [
    f"select rowid, score from t where e match '{QUERY}' and k = 5",
    f"select rowid, score, e, p, m, s from t where e match '{QUERY}' and k = 20",
    f"select rowid, score from t where e match '{QUERY}' and k = 5 and p = 'b'",
    f"select rowid, score from t where e match '{QUERY}' and k = 5 and m > 3",
    f"select rowid, score from t where e match '{QUERY}' and k = 5 and s = 'x1'",
    f"select rowid, score from t where e match '{QUERY}' and k = 5 and rowid in (3, 300, 650)",
    f"select rowid, score from t where e match '{QUERY}' and k = 5 and rowid between 100 and 400",
    "select rowid, e, p, m, s from t",
    "select count(*), total(m) from t where p = 'a'",
    "select e from t where rowid = 5",
    "insert into t(rowid, e, p, m, s) values (1000, '[1,1,1,1]', 'a', 1, 'x1')",
    "insert into t(rowid, e, p, m, s) values (1001, '[1,2,3,4]', 'new', 2, 'x2')",
    "insert or replace into t(rowid, e, p, m, s) values (7, '[0,1,0,1]', 'c', 3, 'x3')",
    "update t set e = '[4,3,2,1]' where rowid = 10",
    "update t set p = 'c' where rowid = 11",
    "update t set m = 99, s = 'y' where rowid = 12",
    "update t set rowid = 2000 where rowid = 13",
    "delete from t where rowid = 14",
    "delete from t where p = 'c' and rowid < 420",
]
# Statement errors that damage can lead to besides SQLITE_CORRUPT: a row that the records name
# but T_rowids does not hold, read for its columns (what a row deleted by this connection while
# a query read it also gives), and a rowid that T_rowids holds though the blocks do not.
ALLOWED = [
    re.compile(r"t: row -?\d+ was deleted while it was read"),
    re.compile(r"UNIQUE constraint failed: t\.rowid"),
]
# T_info's format changed to a later one: the table is refused, as a newer hybridsql's would be.
NEWER = re.compile(
    r"vector_index: t was made by a newer hybridsql \(storage format \d+; this one reads 3\)"
)
# SQLITE_CORRUPT names the table and the block, or the shadow table it cannot read.
CORRUPT = re.compile(
    r"(t: block -?\d+ is damaged: |t: row -?\d+ is damaged: "
    r"|t: row -?\d+ is in block -?\d+, which is missing"
    r"|t: the partition of row -?\d+ has no last block"
    r"|t: its rows have locations, but it has no block"
    r"|vector_index: the shadow tables of t cannot be read: "
    r"|vector_index: the layout of t in t_info is corrupt)"
)


def make_template(path: str) -> None:
    conn = hybridsql.connect(path, backend="extension")
    conn.execute(
        f"create virtual table t using vector_index(e float[{D}], p text partition key,"
        " m integer, s text)"
    )
    rng = random.Random(7)
    with conn:
        conn.executemany(
            "insert into t(rowid, e, p, m, s) values (?, ?, ?, ?, ?)",
            [
                (
                    i,
                    "[" + ", ".join(f"{rng.uniform(-1, 1):.4f}" for _ in range(D)) + "]",
                    "a" if i < 300 else "b" if i < 600 else "c",
                    None if i % 11 == 0 else i % 7,
                    f"x{i % 5}",
                )
                for i in range(1, 701)
            ],
        )
    conn.execute("create table other(x)")
    conn.close()


class Source:
    """The choices an input makes: from atheris's FuzzedDataProvider or from random.Random."""

    def __init__(self, fdp=None, rng=None):
        self.fdp, self.rng = fdp, rng

    def int(self, lo: int, hi: int) -> int:
        return self.fdp.ConsumeIntInRange(lo, hi) if self.fdp else self.rng.randint(lo, hi)

    def pick(self, seq):
        return seq[self.int(0, len(seq) - 1)]

    def bytes(self, n: int) -> bytes:
        return self.fdp.ConsumeBytes(n) if self.fdp else self.rng.randbytes(n)

    def value(self, nulls: bool = True):
        """An edge integer, any integer, a real, text or a blob (NULL where allowed)."""
        kind = self.int(0, 6 if nulls else 5)
        if kind <= 1:
            return self.pick(INTS)
        if kind == 2:
            return self.int(-(2**63), 2**63 - 1)
        if kind == 3:
            return self.pick([0.5, 2.0, -1.0, 1e300, float("nan")])
        if kind == 4:
            return self.pick(["", "2", "x", "16", "a"])
        if kind == 5:
            return self.bytes(self.int(0, 9))
        return None


def rowids_of(plain, table: str, column: str = "id"):
    return [r for (r,) in plain.execute(f"select {column} from {table}")]


def mutate(plain, src: Source) -> str:
    """Changes one shadow row; what it did, for the failure message."""
    shadow = src.pick(SHADOWS)
    table = f"t_{shadow}"
    if shadow == "info":
        key = src.pick(["format", "page_size", "block_rows", "group_rows"])
        if src.int(0, 3) == 0:
            plain.execute("delete from t_info where key = ?", (key,))
            return f"delete {key} from t_info"
        value = src.value()
        plain.execute("update t_info set value = ? where key = ?", (value, key))
        return f"t_info {key} = {value!r}"
    ids = rowids_of(plain, table)
    if shadow in ("codes", "vectors"):
        if not ids:
            return f"{table} is empty"
        row = src.pick(ids)
        (data,) = plain.execute(f"select data from {table} where id = ?", (row,)).fetchone()
        if not isinstance(data, bytes):  # an earlier change made it another type
            data = str(data).encode()
        how = src.int(0, 6)
        if how == 0:
            new = data[: src.int(0, len(data))]
        elif how == 1:
            new = data + bytes(src.int(1, 600))
        elif how in (2, 3):
            new = bytearray(data)
            for _ in range(src.int(1, 8)):
                if new:
                    new[src.int(0, len(new) - 1)] = src.int(0, 255)
            new = bytes(new)
        elif how == 4:
            new = src.value(nulls=False)
        elif how == 5:
            plain.execute(f"delete from {table} where id = ?", (row,))
            return f"delete {table} {row}"
        else:
            new_id = src.pick([row + 1, row - 1, row + 256, 0, -1, 2**40])
            plain.execute(f"insert or replace into {table} values (?, ?)", (new_id, data))
            return f"copy {table} {row} to {new_id}"
        try:
            plain.execute(f"update {table} set data = ? where id = ?", (new, row))
        except apsw.ConstraintError:  # NaN binds as NULL
            return f"{table} {row} data = {new!r} refused"
        return f"{table} {row} data = {how}: {len(data)} -> {new!r:.80}"
    columns = {
        "blocks": ["dims", "capacity", "count", "nonce", "p0"],
        "rowids": ["id", "block", "slot", "m0", "m1"],
    }[shadow]
    if not ids:
        return f"{table} is empty"
    row = src.pick(ids)
    how = src.int(0, 5)
    if how == 0:
        plain.execute(f"delete from {table} where id = ?", (row,))
        return f"delete {table} {row}"
    column = src.pick(columns)
    nullable = column in ("p0", "m0", "m1")
    value = src.value(nulls=nullable)
    if column == "id" and not isinstance(value, int):
        value = src.pick(INTS)
    try:
        plain.execute(f"update {table} set {column} = ? where id = ?", (value, row))
    except apsw.ConstraintError:  # a rowid already taken, or NOT NULL
        return f"{table} {row} {column} = {value!r} refused"
    return f"{table} {row} {column} = {value!r}"


def check(template: str, work: str, src: Source) -> list:
    """One input: the messages of SQLITE_CORRUPT that the statements met (AssertionError when a
    requirement fails)."""
    for leftover in (work + "-wal", work + "-shm"):
        if os.path.exists(leftover):
            os.remove(leftover)
    shutil.copy(template, work)
    plain = apsw.Connection(work)
    done = [mutate(plain, src) for _ in range(src.int(1, 3))]
    plain.close()
    conn = hybridsql.connect(work, backend="extension")
    try:
        conn.execute("begin; insert into other values (1)")
        met, refused = [], False
        for sql in STATEMENTS:
            try:
                rows = conn.execute(sql).fetchall()
                if " match " in sql:  # each row answered is one the table holds
                    for row in rows:
                        held = "select count(*) from t_rowids where id = ?"
                        if conn.execute(held, (row[0],)).fetchone() != (1,):
                            raise AssertionError(f"{done}: {sql}: answered rowid {row[0]}")
            except apsw.Error as e:
                message = str(e)
                if isinstance(e, apsw.CorruptError):
                    if not CORRUPT.match(message):
                        raise AssertionError(f"{done}: {sql}: unnamed damage: {message}") from e
                    if not met:  # checked now: a later statement may replace the damaged row
                        try:
                            report = conn.execute("pragma integrity_check").fetchall()
                        except apsw.Error as failed:  # a problem reported as an error
                            report = [(str(failed),)]
                    met.append(message)
                elif NEWER.fullmatch(message):
                    refused = True
                elif not (
                    isinstance(e, (apsw.SQLError, apsw.ConstraintError))
                    and any(p.fullmatch(message) for p in ALLOWED)
                ):
                    raise AssertionError(f"{done}: {sql}: {type(e).__name__}: {message}") from e
            if conn.get_autocommit() or conn.execute("select count(*) from other").fetchone() != (
                1,
            ):
                raise AssertionError(f"{done}: {sql}: the caller's transaction was rolled back")
        conn.execute("commit")
        if refused:  # a format this hybridsql does not read: not damage, and not checked
            return met
        if met and report == [("ok",)]:  # integrity_check at the first damage met
            raise AssertionError(f"{done}: statements met {met[0]!r}, integrity_check says ok")
        return met
    finally:
        conn.close()


def main() -> None:
    import atheris

    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None  # memory: the copies take no disk
    folder = tempfile.mkdtemp(prefix="fuzz-shadow-", dir=shm)
    template = os.path.join(folder, "template.db")
    make_template(template)

    def one(data: bytes) -> None:
        source = Source(fdp=atheris.FuzzedDataProvider(data))
        check(template, os.path.join(folder, "work.db"), source)

    atheris.instrument_all()  # the mutations' branches guide it (the C code is not instrumented)
    atheris.Setup(sys.argv, one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
