"""A database's own model (Requirement 16 of csrc/model/embedsql.c, issue 39): embed() reads it only
from an ordinary table main.hybridsql_model and runs nothing else of the database's. A view
(which crashed every client by recursion, or hung it, or made it copy 900 MB), a virtual table,
a WITHOUT ROWID table, generated columns, a table of the wrong shape (once silently passed
over), a temp object of the same name: each is refused with one line, the same in the stock
sqlite3 shell, apsw and pysqlite3, and the same again at the next embed() of the connection.
The user's own model (hybridsql_model(), $HYBRIDSQL_MODEL) outranks the database's.

Every client runs in a process of its own with a time limit: on the code before this, the first
cases crashed or hung their process."""

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import apsw
import pytest
from conftest import ROOT, SHELL

import hybridsql
from hybridsql.db.extension import cache_dir
from hybridsql.embedding import engine, model_file

LIMIT = 120  # seconds a client may take; the old code hung forever on a recursive view
KEEP = (
    "a database keeps its model in an ordinary table hybridsql_model(model BLOB) as `hybridsql"
    " model --into FILE` writes it; or name a model with hybridsql_model('PATH') or"
    " $HYBRIDSQL_MODEL"
)
VIEW = f"embed(): main.hybridsql_model is a view, whose SQL embed() does not run; {KEEP}"
VIRTUAL = (
    f"embed(): main.hybridsql_model is a virtual table, whose module embed() does not run; {KEEP}"
)
WITHOUT_ROWID = (
    "embed(): main.hybridsql_model is a WITHOUT ROWID table, which has no BLOB handle to read;"
    f" {KEEP}"
)
GENERATED = (
    f"embed(): main.hybridsql_model has generated columns, whose values SQL computes; {KEEP}"
)
NO_COLUMN = f"embed(): main.hybridsql_model has no column model; {KEEP}"
HIDDEN_ROWID = (
    "embed(): main.hybridsql_model has columns named rowid, _rowid_ and oid, which hide the"
    f" rowid its model is read by; {KEEP}"
)
NOT_A_TABLE = f"embed(): main.hybridsql_model is not an ordinary table; {KEEP}"
STORE = "store them with `hybridsql model --into FILE`"
REMAKE = "make it again with `hybridsql model --out FILE`"
SIZE = 384 * 4  # the bytes of a vector of the model in the cache folder
# A second model, of the real format: 32 dimensions (fuzz/model_seed.py wrote it)
with open(os.path.join(ROOT, "fuzz", "corpus", "model", "tiny-as-written"), "rb") as f:
    TINY = f.read()[1:]
TINY_SIZE = 32 * 4


@pytest.fixture(scope="session")
def model_file_in_cache():
    """The model file where the extension looks last (conftest's HYBRIDSQL_CACHE_DIR): the one
    a database that holds no model of its own is embedded with."""
    path = engine.model_path()
    if not path.is_file():
        engine.write_model()
    assert path == cache_dir() / engine.MODEL_FILE
    return path


def build(path, *statements) -> str:
    """A database made by ``statements`` (SQL, or (SQL, parameters)) on a connection without
    the extension: a hostile file can be made anywhere."""
    conn = apsw.Connection(str(path))
    for statement in statements:
        sql, params = statement if isinstance(statement, tuple) else (statement, ())
        conn.execute(sql, params)
    conn.close()
    return str(path)


def header(declared: int) -> bytes:
    """The tiny model with its header's file size set to ``declared`` and sealed again."""
    data = bytearray(TINY)
    data[24:32] = struct.pack("<Q", declared)
    return model_file.seal(data)


def flipped() -> bytes:
    data = bytearray(TINY)
    data[len(data) // 2] ^= 0x10
    return bytes(data)


# The Python clients, each in this process of its own: the setup statements on the connection,
# then embed() twice; one JSON list of outcomes per client ("N bytes" or the error's text).
CLIENTS = r"""
import json, sys
import apsw
import hybridsql
from hybridsql.db import extension
db, setup, times = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])

def run(execute):
    for sql in setup:
        execute(sql)
    said = []
    for i in range(times):
        try:
            value = execute(f"select embed('text {i}')")[0][0]
            said.append(f"{len(value)} bytes")
        except Exception as e:
            said.append(str(e))
    return said

found = {}
conn = apsw.Connection(db)
extension.load(conn)
found["apsw"] = run(lambda sql: conn.execute(sql).fetchall())
try:
    import pysqlite3.dbapi2 as pysqlite3
except ImportError:
    pass
else:
    p = pysqlite3.connect(db)
    extension.load(p)
    found["pysqlite3"] = run(lambda sql: p.execute(sql).fetchall())
print(json.dumps(found))
"""


def run(argv, *, input=None, env=None, cwd=None) -> subprocess.CompletedProcess:
    """argv, its output piped; a crash or a hang is the test's failure, not the suite's."""
    try:
        done = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            timeout=LIMIT,
            check=False,
            env={**os.environ, **(env or {})},
            cwd=cwd,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{argv[0]} still ran after {LIMIT} s: the lookup hangs")
    assert done.returncode >= 0, f"{argv[0]} died of signal {-done.returncode}: {done.stderr}"
    return done


def in_python(tmp_path, script, *args, env=None) -> subprocess.CompletedProcess:
    """A Python script of this file's in a process of its own, outside the checkout (whose
    hybridsql/ may be the uncompiled source); it must succeed."""
    path = tmp_path / "client.py"
    path.write_text(script)
    done = run([sys.executable, str(path), *args], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done


def in_shell(db, setup=(), times=2, env=None) -> list:
    """The stock sqlite3 shell's outcomes of ``times`` embed() after ``setup``, from one
    script on its stdin (a statement's error does not end the script there)."""
    lines = [*setup, *(f"select 'embed', length(embed('text {i}'));" for i in range(times))]
    done = run(
        [SHELL, "-cmd", f".load {hybridsql.loadable_path()}", db],
        input="\n".join(lines) + "\n",
        env=env,
    )
    errors = {}
    for line in done.stderr.splitlines():
        said = re.match(r"^(?:Runtime error|Error:) near line (\d+): (.*)$", line)
        assert said, f"the shell said: {done.stderr}"
        errors[int(said.group(1))] = said.group(2)
    printed = iter(line for line in done.stdout.splitlines() if line.startswith("embed|"))
    found = []
    for number in range(len(setup) + 1, len(lines) + 1):
        found.append(errors.get(number) or f"{next(printed).split('|')[1]} bytes")
    return found


def in_every_client(db, setup=(), times=2, env=None) -> dict:
    """{client: [outcome of each embed()]}: the stock shell, apsw and (where it is installed)
    pysqlite3, each in a process of its own."""
    folder = os.path.dirname(db)
    statements = json.dumps([s.rstrip(";") for s in setup])
    done = in_python(Path(folder), CLIENTS, db, statements, str(times), env=env)
    found = json.loads(done.stdout)
    found["sqlite3 shell"] = in_shell(db, setup, times, env)
    return found


# name: (statements that make the database, statements on the connection, what embed() says)
HOSTILE = {
    "a view that calls embed()": (
        ["create view hybridsql_model as select embed('x') as model"],
        [],
        VIEW,
    ),
    "a view over an endless recursive query": (
        [
            "create view hybridsql_model as with recursive r(i) as (select 1 union all"
            " select i + 1 from r) select max(i) as model from r"
        ],
        [],
        VIEW,
    ),
    "a view of a 900 MB zeroblob": (
        ["create view hybridsql_model as select zeroblob(900000000) as model"],
        [],
        VIEW,
    ),
    "a virtual table": (["create virtual table hybridsql_model using fts5(model)"], [], VIRTUAL),
    "a WITHOUT ROWID table": (
        [
            "create table hybridsql_model(id integer primary key, model blob) without rowid",
            ("insert into hybridsql_model values (1, ?)", (TINY,)),
        ],
        [],
        WITHOUT_ROWID,
    ),
    "a generated model": (
        [
            "create table hybridsql_model(id, model blob as (zeroblob(900000000)))",
            "insert into hybridsql_model(id) values (1)",
        ],
        [],
        GENERATED,
    ),
    "a generated column beside the model": (
        [
            "create table hybridsql_model(model blob, size as (length(model)))",
            ("insert into hybridsql_model(model) values (?)", (TINY,)),
        ],
        [],
        GENERATED,
    ),
    "a table with no column model": (
        [
            "create table hybridsql_model(data blob)",
            ("insert into hybridsql_model values (?)", (TINY,)),
        ],
        [],
        NO_COLUMN,
    ),
    "columns that hide the rowid": (
        [
            "create table hybridsql_model(model blob, rowid, _rowid_, oid)",
            ("insert into hybridsql_model(model) values (?)", (TINY,)),
        ],
        [],
        HIDDEN_ROWID,
    ),
    "a temp view of the connection": (
        [],
        ["create temp view hybridsql_model as select embed('x') as model;"],
        "embed(): temp.hybridsql_model is a view of this connection, where embed() never looks"
        f" for a model: drop it; {KEEP}",
    ),
    "a temp table of the connection holding a model": (
        [],
        [
            "create temp table hybridsql_model(model blob);",
            f"insert into temp.hybridsql_model values (x'{TINY.hex()}');",
        ],
        "embed(): temp.hybridsql_model is a table of this connection, where embed() never looks"
        f" for a model: drop it; {KEEP}",
    ),
    "a view written over a table's row with writable_schema, read so": (
        [
            "create table t(model blob)",
            "pragma writable_schema = on",
            "update sqlite_master set name = 'hybridsql_model', tbl_name = 'hybridsql_model',"
            " sql = 'CREATE VIEW hybridsql_model AS SELECT embed(1) AS model' where name = 't'",
        ],
        ["pragma writable_schema = on;"],
        VIEW,
    ),
    "a row named hybridsql_model that makes another table, read with writable_schema": (
        [
            "create table hybridsql_model(model blob)",
            "pragma writable_schema = on",
            "update sqlite_master set sql = 'CREATE TABLE other(model blob)'"
            " where name = 'hybridsql_model'",
        ],
        ["pragma writable_schema = on;"],
        NOT_A_TABLE,
    ),
    "a view written over a table's row with writable_schema": (
        [
            "create table t(model blob)",
            "pragma writable_schema = on",
            "update sqlite_master set name = 'hybridsql_model', tbl_name = 'hybridsql_model',"
            " sql = 'CREATE VIEW hybridsql_model AS SELECT embed(1) AS model' where name = 't'",
        ],
        [],
        "embed(): cannot look for a model in this database's table hybridsql_model: malformed"
        " database schema (hybridsql_model)",
    ),
    "NULL for the model": (
        ["create table hybridsql_model(model blob)", "insert into hybridsql_model values (null)"],
        [],
        f"embed(): the table hybridsql_model holds NULL in its column model, not the model"
        f" file's bytes; {STORE}",
    ),
    "a 20 MB zeroblob": (
        [
            "create table hybridsql_model(model blob)",
            "insert into hybridsql_model values (zeroblob(20000000))",
        ],
        [],
        "embed(): the table hybridsql_model holds a BLOB of 20000000 bytes in its column model"
        ' that is not a model file (it does not start with "hybridsql model"); store one with'
        " `hybridsql model --into FILE`",
    ),
    "a header that declares 300 MiB": (
        [
            "create table hybridsql_model(model blob)",
            ("insert into hybridsql_model values (?)", (header(300 << 20),)),
        ],
        [],
        "embed(): the model in the table hybridsql_model has 314572800 bytes, more than the 256"
        " MiB a database's model may have; name a model file with hybridsql_model('PATH') or"
        " $HYBRIDSQL_MODEL",
    ),
    "a header that declares other bytes than the BLOB's": (
        [
            "create table hybridsql_model(model blob)",
            ("insert into hybridsql_model values (?)", (header(len(TINY) + 64),)),
        ],
        [],
        f"embed(): the model in the table hybridsql_model is damaged: its header says"
        f" {len(TINY) + 64} bytes, its BLOB has {len(TINY)}; store it again with `hybridsql model"
        f" --into FILE`",
    ),
    "a model with a byte changed": (
        [
            "create table hybridsql_model(model blob)",
            ("insert into hybridsql_model values (?)", (flipped(),)),
        ],
        [],
        "embed(): the model in the table hybridsql_model: the model file is damaged (its"
        f" checksum does not match its bytes): {REMAKE}",
    ),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_database_is_refused_with_one_line_in_every_client(
    model_file_in_cache, tmp_path, name
):
    statements, setup, line = HOSTILE[name]
    db = build(tmp_path / "hostile.db", *statements)
    found = in_every_client(db, setup)
    assert found == {client: [line, line] for client in found}
    assert "\n" not in line


# A database's model is read in any of its legitimate shapes, as before.
STORED = {
    "hybridsql model --into": ["create table hybridsql_model(model blob)"],
    "a named table with an integer key, more columns and a later row": [
        'create table "HybridSQL_Model"(id integer primary key, note text, model blob)',
        "insert into hybridsql_model values (7, 'an empty one first', null)",
        "delete from hybridsql_model",
    ],
    "a STRICT table with an index and triggers that refuse any change": [
        "create table hybridsql_model(model blob, note any) strict",
        "create index by_model on hybridsql_model(length(model))",
        "create trigger no_delete before delete on hybridsql_model begin"
        " select raise(fail, 'a trigger ran'); end",
        "create trigger no_update before update on hybridsql_model begin"
        " select raise(fail, 'a trigger ran'); end",
    ],
    "a column named rowid": ["create table hybridsql_model(rowid text, model blob)"],
}


@pytest.mark.parametrize("name", list(STORED))
def test_a_database_keeps_its_model_in_an_ordinary_table(model_file_in_cache, tmp_path, name):
    """The tiny model stored in the table outranks the one in the cache folder (32 dimensions,
    not 384), in every client."""
    db = build(
        tmp_path / "stored.db",
        *STORED[name],
        ("insert into hybridsql_model(model) values (?)", (TINY,)),
        ("insert into hybridsql_model(model) values (?)", (b"a second row is not read",)),
    )
    found = in_every_client(db)
    assert found == {client: [f"{TINY_SIZE} bytes"] * 2 for client in found}


def test_an_attached_databases_table_is_never_read(model_file_in_cache, tmp_path):
    """Only main's table is a model: an attached database's view is not looked at (the model
    in the cache folder embeds), and no database can be attached as main."""
    hostile = build(
        tmp_path / "hostile.db", "create view hybridsql_model as select embed('x') as model"
    )
    db = build(tmp_path / "plain.db", "create table t(x)")
    found = in_every_client(db, [f"attach '{hostile}' as aux;"])
    assert found == {client: [f"{SIZE} bytes"] * 2 for client in found}
    conn = apsw.Connection(db)
    with pytest.raises(apsw.SQLError, match="database main is already in use"):
        conn.execute("attach ? as main", (hostile,))


def test_an_empty_table_is_no_model(model_file_in_cache, tmp_path):
    db = build(tmp_path / "empty.db", "create table hybridsql_model(model blob)")
    found = in_every_client(db)
    assert found == {client: [f"{SIZE} bytes"] * 2 for client in found}


def test_the_users_model_outranks_the_databases(model_file_in_cache, tmp_path):
    """$HYBRIDSQL_MODEL or hybridsql_model() first: the database's table is never looked at,
    not even when it is a view that would crash the lookup, and its own model is not used."""
    stored = build(
        tmp_path / "stored.db",
        "create table hybridsql_model(model blob)",
        ("insert into hybridsql_model values (?)", (TINY,)),
    )
    hostile = build(
        tmp_path / "hostile.db", "create view hybridsql_model as select embed('x') as model"
    )
    mine = {"HYBRIDSQL_MODEL": str(model_file_in_cache)}
    for db in (stored, hostile):
        found = in_every_client(db, env=mine)
        assert found == {client: [f"{SIZE} bytes"] * 2 for client in found}
        found = in_every_client(db, [f"select hybridsql_model('{model_file_in_cache}');"])
        assert found == {client: [f"{SIZE} bytes"] * 2 for client in found}


def test_a_refusal_is_kept_by_the_connection(model_file_in_cache, tmp_path):
    """The refused table is not read again: the connection says the same line even once the
    table holds a model (a new connection finds it), until hybridsql_model() names one."""
    db = build(
        tmp_path / "refused.db",
        "create table hybridsql_model(model blob)",
        "insert into hybridsql_model values (x'00')",
    )
    conn = hybridsql.connect(db)
    line = (
        "embed(): the model in the table hybridsql_model: the model file is truncated (1 bytes,"
        f" not even a header): {REMAKE}"
    )
    with pytest.raises(apsw.SQLError, match="^" + re.escape(line) + "$"):
        conn.execute("select embed('x')").fetchall()
    other = apsw.Connection(db)
    other.execute("update hybridsql_model set model = ?", (TINY,))
    other.close()
    with pytest.raises(apsw.SQLError, match="^" + re.escape(line) + "$"):
        conn.execute("select embed('x')").fetchall()
    assert in_every_client(db)["apsw"] == [f"{TINY_SIZE} bytes"] * 2
    conn.execute("select hybridsql_model(?)", (str(model_file_in_cache),)).fetchall()
    assert len(conn.execute("select embed('x')").fetchone()[0]) == SIZE


def maxrss_kb(argv, script) -> int:
    """The most resident memory of ``argv`` reading ``script`` on stdin, in KB."""
    probe = (
        "import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[2:], input=sys.argv[1], text=True, capture_output=True)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, script, *argv],
        capture_output=True,
        text=True,
        timeout=LIMIT,
        check=True,
    )
    return int(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss in KB")
@pytest.mark.parametrize(
    "statements",
    [
        ["create view hybridsql_model as select zeroblob(900000000) as model"],
        [
            "create table hybridsql_model(model blob)",
            "insert into hybridsql_model values (zeroblob(64000000))",
        ],
    ],
    ids=["a view of 900 MB", "a table of 64 MB"],
)
def test_a_refused_blob_is_never_copied(model_file_in_cache, tmp_path, statements):
    """Two embed() on a database whose model is a huge zeroblob add next to nothing to the
    client's memory (the old code copied the BLOB at every call: 2.6 GB for two of 900 MB)."""
    db = build(tmp_path / "huge.db", *statements)
    shell = [SHELL, "-cmd", f".load {hybridsql.loadable_path()}", db]
    alone = maxrss_kb(shell, "select 1;\n")
    embedded = maxrss_kb(shell, "select embed('a');\nselect embed('b');\n")
    assert embedded - alone < 16_000


# An authorizer, SQLite's hook for each table, function and pragma a statement is prepared
# with, sees the lookup's own statements.
READS = r"""
import json, sys
import apsw
from hybridsql.db import extension
conn = apsw.Connection(sys.argv[1])
extension.load(conn)
seen = set()
def authorizer(action, first, second, database, trigger):
    names = {apsw.SQLITE_READ: "read", apsw.SQLITE_FUNCTION: "function",
             apsw.SQLITE_PRAGMA: "pragma", apsw.SQLITE_SELECT: "select"}
    what = first if action in (apsw.SQLITE_READ, apsw.SQLITE_PRAGMA) else second
    seen.add(f"{names.get(action, action)} {what or ''}".strip())
    return apsw.SQLITE_OK
conn.execute("select 1")
conn.authorizer = authorizer
value = conn.execute("select embed('x')").fetchone()[0]
print(json.dumps([len(value), sorted(seen)]))
"""


def test_the_lookup_reads_the_schema_and_the_table_alone(model_file_in_cache, tmp_path):
    """What the lookup prepares: reads of the schema tables and of the model's table, the
    pragmas that describe the table, typeof(); with $HYBRIDSQL_MODEL set, nothing."""
    db = build(
        tmp_path / "stored.db",
        "create table hybridsql_model(model blob)",
        ("insert into hybridsql_model values (?)", (TINY,)),
        "create view other as select embed('x') as model",
    )
    done = in_python(tmp_path, READS, db)
    assert json.loads(done.stdout) == [
        TINY_SIZE,
        [
            "function embed",  # the statement's own embed()
            "function typeof",
            "pragma index_info",
            "pragma table_xinfo",
            "read hybridsql_model",
            "read sqlite_master",
            "read sqlite_temp_master",
            "select",
        ],
    ]
    done = in_python(tmp_path, READS, db, env={"HYBRIDSQL_MODEL": str(model_file_in_cache)})
    assert json.loads(done.stdout) == [SIZE, ["function embed", "select"]]


REENTRY = r"""
import json, sys
import hybridsql
from hybridsql.db import extension
client = sys.argv[1]
if client == "apsw":
    conn = hybridsql.connect(":memory:")
    def set_authorizer(f): conn.authorizer = f
    add_function = lambda name, f: conn.create_scalar_function(name, f, 0)
else:
    import pysqlite3.dbapi2 as pysqlite3
    conn = pysqlite3.connect(":memory:")
    extension.load(conn)
    set_authorizer = conn.set_authorizer
    add_function = lambda name, f: conn.create_function(name, 0, f)
armed, said = [False], []
def arm():
    armed[0] = True
    return 1
def authorizer(*args):
    if armed[0]:  # a statement of the lookup is being prepared
        armed[0] = False
        for sql in ("select embed('x')", "select hybridsql_model(x'')"):
            try:
                conn.execute(sql).fetchall()
                said.append("it ran")
            except Exception as e:
                said.append(str(e))
    return 0
add_function("arm", arm)
set_authorizer(authorizer)
value = conn.execute("select arm(), embed('y')").fetchall()[0][1]
print(json.dumps([len(value), said]))
"""


@pytest.mark.parametrize("client", ["apsw", "pysqlite3"])
def test_a_call_from_inside_the_lookup_is_refused(model_file_in_cache, tmp_path, client):
    """embed() and hybridsql_model() called by an application's callback while the lookup's
    statements are prepared: one line each, and the lookup goes on (the old code ran a second
    lookup inside the first)."""
    if client == "pysqlite3":
        pytest.importorskip("pysqlite3", reason="pysqlite3-binary is Linux x86-64 only")
    done = in_python(tmp_path, REENTRY, client)
    looking = (
        "called while this connection looks for its model (from inside the lookup: an"
        " authorizer, progress handler or trace callback)"
    )
    assert json.loads(done.stdout) == [
        SIZE,
        [
            f"embed(): {looking}; call it after",
            f"hybridsql_model(): {looking}; call it before or after",
        ],
    ]


INTERRUPTED = r"""
import json, sys
import apsw
from hybridsql.db import extension
conn = apsw.Connection(sys.argv[1])
extension.load(conn)
armed = [False]
def authorizer(action, *args):
    if action == apsw.SQLITE_READ:  # a statement of the lookup (embed('x') itself reads none)
        armed[0] = True
    return apsw.SQLITE_OK
conn.execute("select 1")
conn.authorizer = authorizer
conn.set_progress_handler(lambda: armed[0], 1)
said = []
try:
    conn.execute("select embed('x')").fetchall()
except apsw.InterruptError as e:
    said.append(f"{type(e).__name__}: {e}")
conn.set_progress_handler(None)
said.append(len(conn.execute("select embed('x')").fetchone()[0]))
print(json.dumps(said))
"""


def test_an_interrupted_lookup_is_sqlites_interrupt_and_not_kept(model_file_in_cache, tmp_path):
    """A lookup that the application interrupts (Datasette's time limit) ends the statement with
    SQLite's own interrupt; the next embed() looks again (the old code went on to the model in
    the cache folder, as if the database had none)."""
    db = build(
        tmp_path / "stored.db",
        "create table hybridsql_model(model blob)",
        ("insert into hybridsql_model values (?)", (TINY,)),
    )
    done = in_python(tmp_path, INTERRUPTED, db)
    assert json.loads(done.stdout) == ["InterruptError: interrupted", TINY_SIZE]
