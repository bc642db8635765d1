"""The SQL functions, through every way in: the sqlite3 shell, apsw, sqlite-utils, Python."""

import json
import math
import os
import platform
import re
import shutil
import sqlite3
import subprocess
import sys

import apsw
import numpy as np
import pytest
import sqlite_utils
from conftest import HYBRIDSQL

import hybridsql
from hybridsql.db.extension import register_python
from hybridsql.db.functions import Functions, NumpyMath, make_math
from hybridsql.errors import ExtensionError

SHELL = shutil.which("sqlite3")
LN2 = math.log(2)

# (SQL, expected value). A float is compared to 1e-12, a JSON list of [id, score] by ids and
# scores, anything else exactly.
VALUES = [
    ("select cosine_similarity('[1,0]', '[1,1]')", 1 / math.sqrt(2)),
    ("select cosine_similarity('[1, 2, 3]', vector_blob('[1,2,3]'))", 1.0),
    ("select cosine_similarity('[1,0]', '[-1,0]')", -1.0),
    ("select cosine_similarity('[0,0]', '[1,1]')", 0.0),
    ("select cosine_similarity(NULL, '[1,1]')", None),
    ("select cosine_similarity(x'0000803f00000000', '[0.5, 0.5]')", 1 / math.sqrt(2)),
    ("select bm25_score(-4.2)", 4.2 / 14.2),
    ("select bm25_score(-4.2, 1)", 4.2 / 5.2),
    ("select bm25_score(NULL)", 0.0),
    ("select bm25_score(3)", 0.0),
    ("select bm25_score(-15) > bm25_score(-12)", 1),
    ("select hybrid_score(0.8, -4.2)", 0.7 * 0.8 + 0.3 * 4.2 / 14.2),
    ("select hybrid_score(NULL, NULL)", 0.0),
    ("select hybrid_score(0.5, NULL)", 0.35),
    ("select hybrid_score(0.5, -10, 1, 0)", 0.5),
    ("select hybrid_score(0.5, -10, 0.5, 0.5, 10)", 0.5),
    ("select temporal_decay('memory/2026-10-22.md', '2026-11-21')", 0.5),
    ("select temporal_decay('MEMORY.md', '2026-11-21')", 1.0),
    ("select temporal_decay('notes/people.md', 0)", 1.0),
    ("select temporal_decay('a/b/c/2026-11-21.md', '2026-11-21T12:00:00Z')", math.exp(-LN2 / 60)),
    ("select temporal_decay('2026-11-21.md', '2026-11-21T02:00:00+02:00')", 1.0),
    ("select temporal_decay('x\\2026-10-22.md', '2026-11-21 00:00:00.000')", 0.5),
    ("select temporal_decay('memory/2026-10-22.md', 1795219200)", 0.5),
    ("select temporal_decay('memory/2026-10-22.md', '2026-11-21', 10)", 0.125),
    ("select temporal_decay('memory/2026-12-25.md', '2026-11-21')", 1.0),
    ("select temporal_decay('memory/2026-02-30.md', '2026-11-21')", 1.0),
    ("select temporal_decay('memory/2026-10-22.md.bak', '2026-11-21')", 1.0),
    ("select temporal_decay(NULL, '2026-11-21')", None),
    ("select temporal_decay('MEMORY.md', NULL)", None),
    # Never NaN or an infinity (issue 26, item 7): scores at the ends of the double range.
    ("select bm25_score(-1e308, 1e308)", 0.5),  # saturation + r overflows
    ("select bm25_score(-1.7976931348623157e308, 1.7976931348623157e308)", 0.5),
    ("select bm25_score(-1e308, 1e-308)", 1.0),
    ("select bm25_score(-1e-308, 1e308)", 0.0),
    ("select hybrid_score(1, -1e308, 1e307, 1e307, 1e-308)", 2e307),
    ("select hybrid_score(-1, NULL, 1e308, 1e308)", -1e308),
    ("select hybrid_score(1, -1e308, 1e308, 0, 1e-308)", 1e308),
    ("select temporal_decay('memory/2026-10-22.md', '2026-10-22', 1e-320)", 1.0),  # inf * 0
    ("select temporal_decay('memory/2026-10-22.md', '2026-10-21', 1e-320)", 1.0),
    ("select temporal_decay('memory/2026-10-22.md', '2026-11-21', 1e-320)", 0.0),
    ("select temporal_decay('memory/2026-10-22.md', 1e308)", 0.0),
    ("select temporal_decay('memory/2026-10-22.md', -1e308)", 1.0),
    ("select vector_json(vector_blob('[0.1, 2, -3.5e-8, 1e30]'))", "[0.1,2,-3.5e-08,1e+30]"),
    ("select vector_json(x'0000803f')", "[1]"),
    ("select vector_json(' [ 1 , 2 ] ')", "[1,2]"),
    ("select hex(vector_blob('[1, -2]'))", "0000803F000000C0"),
    ("select vector_blob(NULL)", None),
    ("select hybridsql_version()", hybridsql.__version__),
    (
        (
            "with t(id, v) as (values (1, '[1,1]'), (2, '[1,0]'), (3, '[1,1]'), (4, NULL))"
            " select cosine_topk('[1,0]', 2, id, v) from t"
        ),
        [[2, 1.0], [1, 1 / math.sqrt(2)]],
    ),
    (
        (
            "with t(id, v) as (values (9, '[1,1]'), (3, '[2,2]'), (5, '[0,1]'))"
            " select cosine_topk('[1,0]', 5, id, v) from t where id > 1"
        ),
        [[3, 1 / math.sqrt(2)], [9, 1 / math.sqrt(2)], [5, 0.0]],
    ),
    (
        "with t(id, v) as (values (1, '[1,1]')) select cosine_topk('[1,0]', 2, id, v) from t where id > 1",
        [],
    ),
    ("with t(id, v) as (values (1, '[1,1]')) select cosine_topk(NULL, 2, id, v) from t", None),
    (
        (
            "with t(id, v) as (values (1, '[1,1]'), (2, '[3,1]')) select count(*)"
            " from json_each((select cosine_topk('[1,0]', 1, id, v) from t))"
        ),
        1,
    ),
]

# (SQL, exact error text).
ERRORS = [
    (
        "select cosine_similarity('[1,2]', x'00')",
        "cosine_similarity(): 2nd argument is a BLOB of 1 bytes, not a multiple of 4",
    ),
    (
        "select cosine_similarity('[1,2]', '[1,2,3]')",
        "cosine_similarity(): 1st argument has 2 dimensions, 2nd argument has 3",
    ),
    (
        "select cosine_similarity('[1,NaN]', '[1,2]')",
        "cosine_similarity(): 1st argument is not a JSON array of numbers",
    ),
    (
        "select cosine_similarity('[1,2,]', '[1,2]')",
        "cosine_similarity(): 1st argument is not a JSON array of numbers",
    ),
    (
        "select cosine_similarity('[1,1e39]', '[1,2]')",
        "cosine_similarity(): 1st argument has a non-finite value at index 1",
    ),
    (
        "select cosine_similarity(x'0000c07f', '[1]')",
        "cosine_similarity(): 1st argument has a non-finite value at index 0",
    ),
    (
        "select cosine_similarity('[]', '[1]')",
        "cosine_similarity(): 1st argument is an empty vector",
    ),
    (
        "select cosine_similarity(x'', '[1]')",
        "cosine_similarity(): 1st argument is an empty vector",
    ),
    (
        "select cosine_similarity(1, '[1]')",
        (
            "cosine_similarity(): 1st argument must be a vector (float32 BLOB or JSON array text), "
            "got integer"
        ),
    ),
    (
        "with t(id, v) as (values (17, '[1,2]')) select cosine_topk('[1,2,3]', 5, id, v) from t",
        "cosine_topk(): 1st argument has 3 dimensions, row 17 has 2",
    ),
    (
        "with t(id, v) as (values (1, '[1,2]')) select cosine_topk('[1,2]', 0, id, v) from t",
        "cosine_topk(): 2nd argument k must be an integer from 1 to 10000, got 0",
    ),
    (
        "with t(id, v) as (values (1, '[1,2]')) select cosine_topk('[1,2]', 10001, id, v) from t",
        "cosine_topk(): 2nd argument k must be an integer from 1 to 10000, got 10001",
    ),
    (
        "with t(id, v) as (values (1, '[1,2]')) select cosine_topk('[1,2]', '5', id, v) from t",
        "cosine_topk(): 2nd argument k must be an integer from 1 to 10000, got text",
    ),
    (
        "with t(id, v) as (values ('a', '[1,2]')) select cosine_topk('[1,2]', 5, id, v) from t",
        "cosine_topk(): 3rd argument id must be an integer, got text",
    ),
    (
        "with t(id, v) as (values (4, '[1,2')) select cosine_topk('[1,2]', 5, id, v) from t",
        "cosine_topk(): 4th argument of row 4 is not a JSON array of numbers",
    ),
    ("select bm25_score('a')", "bm25_score(): 1st argument rank must be a number, got text"),
    ("select bm25_score(-1, 0)", "bm25_score(): 2nd argument saturation must be > 0, got 0"),
    (
        "select hybrid_score(0.5, -1, -1, 0.3)",
        "hybrid_score(): 3rd argument vector_weight must be >= 0, got -1",
    ),
    (
        "select hybrid_score(0.5, -1, 0.7, -0.5)",
        "hybrid_score(): 4th argument keyword_weight must be >= 0, got -0.5",
    ),
    (
        "select hybrid_score('x', -1)",
        "hybrid_score(): 1st argument vector_score must be a number, got text",
    ),
    (
        "select temporal_decay('2026-01-01.md', 'yesterday')",
        "temporal_decay(): 2nd argument now must be unix seconds or ISO-8601 text, got unreadable text",
    ),
    (
        "select temporal_decay('2026-01-01.md', '2026-13-01')",
        "temporal_decay(): 2nd argument now must be unix seconds or ISO-8601 text, got unreadable text",
    ),
    (
        "select temporal_decay('2026-01-01.md', 0, 0)",
        "temporal_decay(): 3rd argument half_life_days must be > 0, got 0",
    ),
    (
        "select temporal_decay(x'00', 0)",
        "temporal_decay(): 1st argument path must be text, got blob",
    ),
    ("select vector_json('[1,')", "vector_json(): 1st argument is not a JSON array of numbers"),
    # Requirement 2: an infinity is an error, never a silent NULL or an infinite score.
    (
        "select bm25_score(-9e999)",
        "bm25_score(): 1st argument rank must be a finite number, got -inf",
    ),
    (
        "select hybrid_score(0, -1, 9e999, 0)",
        "hybrid_score(): 3rd argument vector_weight must be a finite number, got inf",
    ),
    (
        "select hybrid_score(9e999, -1)",
        "hybrid_score(): 1st argument vector_score must be a finite number, got inf",
    ),
    (
        "select temporal_decay('memory/2026-01-01.md', 9e999, 9e999)",
        "temporal_decay(): 3rd argument half_life_days must be a finite number, got inf",
    ),
    (
        "select temporal_decay('memory/2026-01-01.md', -9e999)",
        "temporal_decay(): 2nd argument now must be a finite number, got -inf",
    ),
    # issue 26, item 7: a vector score is a cosine, and no score is infinite
    (
        "select hybrid_score(1e308, -1e308, 1e308, 1e308, 1e-308)",
        "hybrid_score(): 1st argument vector_score must be from -1 to 1, got 1e+308",
    ),
    (
        "select hybrid_score(-1.5, -1)",
        "hybrid_score(): 1st argument vector_score must be from -1 to 1, got -1.5",
    ),
    (
        "select hybrid_score(1, -1e308, 1e308, 1e308, 1e-308)",
        "hybrid_score(): 3rd argument vector_weight 1e+308 and 4th argument keyword_weight 1e+308"
        " give a score beyond the range of a double",
    ),
    (
        "select hybrid_score(1, -1e308, 1.7e308, 1e308, 1)",
        "hybrid_score(): 3rd argument vector_weight 1.7e+308 and 4th argument keyword_weight"
        " 1e+308 give a score beyond the range of a double",
    ),
]

FUNCTIONS = {
    ("cosine_similarity", 2),
    ("cosine_topk", 4),
    ("bm25_score", 1),
    ("bm25_score", 2),
    ("hybrid_score", 2),
    ("hybrid_score", 4),
    ("hybrid_score", 5),
    ("temporal_decay", 2),
    ("temporal_decay", 3),
    ("vector_blob", 1),
    ("vector_json", 1),
    ("hybridsql_version", 0),
    ("hybridsql_debug", 0),
    ("hybridsql_simd", 0),
}


def run_shell(sql, env=None):
    """Runs SQL in the stock sqlite3 shell after .load; (rows as dicts, stderr)."""
    proc = subprocess.run(
        [SHELL, ":memory:", "-json", "-cmd", f".load {hybridsql.loadable_path()}", sql],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    rows = json.loads(proc.stdout) if proc.stdout.strip() else []
    return rows, proc.stderr.strip()


def apsw_conn(backend):
    """A connection with the SQL functions of one backend; ``numpy-math``: the numpy backend's
    functions with numpy's own math, as where the cffi kernels are not built."""
    conn = apsw.Connection(":memory:")
    if backend == "numpy-math":
        register_python(conn, Functions(NumpyMath()))
        return conn
    assert hybridsql.load(conn, backend) == backend
    return conn


WAYS = ["shell", "apsw", "sqlite-utils", "numpy", "numpy-math", "python"]
# sqlite-utils (Python's sqlite3) gets the native extension where Python's sqlite3 can load
# extensions, else the Python functions, which differ where the tests below say.
SQLITE3_NATIVE = hybridsql.backend_of(sqlite_utils.Database(memory=True).conn) == "extension"


def query_one(way, sql):
    """The single value SQL gives through one way in."""
    if way == "shell":
        rows, err = run_shell(sql)
        if err:
            raise RuntimeError(err)
        return next(iter(rows[0].values()))
    if way == "sqlite-utils":
        return sqlite_utils.Database(memory=True).execute(sql).fetchone()[0]
    conn = hybridsql.connect(":memory:") if way == "apsw" else apsw_conn(way)
    return conn.execute(sql).fetchone()[0]


def assert_same(got, want):
    if isinstance(want, list):
        got = json.loads(got)
        assert [i for i, _ in got] == [i for i, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-12)
    elif isinstance(want, float):
        assert got == pytest.approx(want, abs=1e-12)
    else:
        assert got == want


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("sql,want", VALUES, ids=[v[0][7:60] for v in VALUES])
def test_values_agree_everywhere(way, sql, want):
    if way == "sqlite-utils" and want == [] and not SQLITE3_NATIVE:
        # Python's sqlite3 returns NULL for a Python aggregate over no rows without calling it.
        want = None
    assert_same(query_one(way, sql), want)


@pytest.mark.parametrize("way", ["apsw", "numpy", "numpy-math", "python"])
@pytest.mark.parametrize("sql,message", ERRORS, ids=[e[0][7:60] for e in ERRORS])
def test_exact_error_text(way, sql, message):
    with pytest.raises(Exception, match="^" + re.escape(message) + "$"):
        query_one(way, sql)


@pytest.mark.parametrize("sql,message", ERRORS, ids=[e[0][7:60] for e in ERRORS])
def test_shell_reports_the_same_error(sql, message):
    rows, err = run_shell(sql)
    assert rows == [] and message in err


@pytest.mark.parametrize("sql,message", ERRORS[:3], ids=[e[0][7:60] for e in ERRORS[:3]])
def test_sqlite_utils_raises_with_the_text_of_the_extension_only(sql, message):
    """Python's sqlite3 passes the native extension's error text on, but replaces a Python
    function's with its own generic one."""
    if SQLITE3_NATIVE:
        text = "^" + re.escape(message) + "$"
    else:
        text = "^user-defined function raised exception$"
    with pytest.raises(sqlite_utils.utils.OperationalError, match=text):  # sqlite3's or pysqlite3's
        query_one("sqlite-utils", sql)


@pytest.mark.parametrize("sql,message", ERRORS[:3], ids=[e[0][7:60] for e in ERRORS[:3]])
def test_python_sqlite3_raises_but_loses_the_text(sql, message):
    """Python's sqlite3 replaces a Python function's error text with its own generic one, where
    it cannot load the extension and gets the Python functions."""
    conn = sqlite3.connect(":memory:")
    register_python(conn, Functions(make_math("numpy")))
    with pytest.raises(sqlite3.OperationalError, match="user-defined function raised exception"):
        conn.execute(sql).fetchall()


def registered(conn):
    cursor = conn.cursor() if isinstance(conn, apsw.Connection) else conn
    return set(cursor.execute("select name, narg from pragma_function_list").fetchall())


@pytest.mark.parametrize("backend", ["extension", "numpy", "python"])
def test_exact_list_of_registered_functions(backend):
    conn = apsw.Connection(":memory:")
    before = registered(conn)
    assert hybridsql.load(conn, backend) == backend
    # The extension also gives FTS5 an auxiliary function, which SQLite lists with narg -1;
    # Python's backends cannot register FTS5 functions, and the search does not ask them to.
    fts5 = {("bm25_candidate", -1)} if backend == "extension" else set()
    # embed() and its model come with the extension; Python registers embed() on its own
    # (register_embed), for a provider the extension does not run.
    model = {("embed", 1), ("embed", 2), ("hybridsql_model", 1)}
    model = model if backend == "extension" else set()
    assert registered(conn) - before == FUNCTIONS | fts5 | model


def test_native_flags_deterministic_and_innocuous_where_true():
    conn = hybridsql.connect(":memory:")
    flags = {
        (name, narg): flags
        for name, narg, flags in conn.execute("select name, narg, flags from pragma_function_list")
        if (name, narg) in FUNCTIONS
    }
    deterministic, innocuous = 0x800, 0x200000
    for key, f in flags.items():
        assert f & innocuous, key
        assert bool(f & deterministic) == (key != ("hybridsql_debug", 0)), key


def test_native_embed_is_neither_deterministic_nor_innocuous_and_its_model_direct_only():
    """embed()'s vector depends on the model file it finds (and the SIMD path), and reading the
    file a path names is no business of a view or a trigger."""
    conn = hybridsql.connect(":memory:")
    flags = dict(
        conn.execute(
            "select name, flags from pragma_function_list"
            " where name in ('embed', 'hybridsql_model') and narg = 1"
        )
    )
    deterministic, innocuous, direct_only = 0x800, 0x200000, 0x80000
    assert set(flags) == {"embed", "hybridsql_model"}
    assert not flags["embed"] & (deterministic | innocuous | direct_only)
    assert flags["hybridsql_model"] & direct_only
    assert not flags["hybridsql_model"] & (deterministic | innocuous)


def test_sqlite3_module_loads_the_extension_where_it_can():
    """Python's sqlite3 loads the native extension where it is built to load extensions (Debian's
    python3 is, pyenv's builds by default are not), else gets Python functions."""
    conn = sqlite3.connect(":memory:")
    backend = hybridsql.load(conn)
    assert (backend == "extension") == hasattr(conn, "enable_load_extension"), backend
    assert hybridsql.backend_of(conn) == backend
    assert conn.execute("select hybrid_score(0.8, -4.2)").fetchone()[0] == pytest.approx(
        0.6487323943661972
    )


def test_sqlite_utils_command_line_has_every_function(tmp_path):
    db = str(tmp_path / "u.db")
    sql = "select hybrid_score(0.8, -4.2) as h, vector_json(vector_blob('[1]')) as v"
    out = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "sqlite-utils"), "query", db, sql],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(out) == [{"h": pytest.approx(0.6487323943661972), "v": "[1]"}]


def test_sqlite_utils_query_embeds_and_searches(example_db):
    """embed() comes with the plugin: a vector search from the sqlite-utils command line."""
    sql = (
        "select json_extract(value, '$[0]') as id from json_each((select"
        " cosine_topk(embed('how do I log in'), 5, chunk_id, vector) from vectors))"
    )
    out = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "sqlite-utils"), "query", example_db, sql],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "HYBRIDSQL_EMBEDDER": "local"},
    ).stdout
    with hybridsql.connect(example_db) as conn:
        from hybridsql.embedding.embedder import Embedder, LocalProvider, register_embed

        register_embed(conn, Embedder(LocalProvider()))
        want = [r[0] for r in conn.execute(sql)]
    assert [row["id"] for row in json.loads(out)] == want and len(want) == 5


def test_embed_without_a_provider_is_a_clear_error(monkeypatch):
    from hybridsql.embedding.embedder import default_embedder, register_embed
    from hybridsql.errors import EmbeddingError

    monkeypatch.setenv("HYBRIDSQL_EMBEDDER", "none")
    conn = apsw.Connection(":memory:")
    register_embed(conn, default_embedder)
    assert conn.execute("select embed(NULL)").fetchone()[0] is None
    message = (
        "embed(): no embedding provider: pip install 'hybridsql[local]' or set HYBRIDSQL_EMBEDDER"
    )
    with pytest.raises(EmbeddingError, match="^" + re.escape(message) + "$"):
        conn.execute("select embed('x')").fetchall()


def test_cli_path_loads_in_stock_shell(tmp_path):
    path = subprocess.run(
        [HYBRIDSQL, "path"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert path == hybridsql.loadable_path()
    out = subprocess.run(
        [SHELL, str(tmp_path / "mem.db"), f".load {path}", "select hybrid_score(0.8, -4.2)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert float(out) == pytest.approx(0.648732394366197)


def test_connect_sets_wal_and_busy_timeout(tmp_path):
    conn = hybridsql.connect(str(tmp_path / "w.db"))
    assert conn.execute("pragma journal_mode").fetchone()[0] == "wal"
    assert conn.execute("pragma busy_timeout").fetchone()[0] == 10000
    assert hybridsql.backend_of(conn) == "extension"


def test_load_rejects_unknown_backend():
    with pytest.raises(ValueError, match="backend must be one of"):
        hybridsql.load(apsw.Connection(":memory:"), "gpu")


def test_extension_backend_is_strict(monkeypatch, tmp_path, caplog):
    """``extension`` raises where the library is missing; ``auto`` falls back to Python and
    says why once per process, on the hybridsql logger."""
    monkeypatch.setattr(hybridsql.db._native, "PATH", str(tmp_path / "hybridsql.so"))
    monkeypatch.setattr(hybridsql.db.extension, "_COPIES", {})  # no binary found yet
    monkeypatch.setattr(hybridsql.db.extension, "_SAID", set())  # nothing said yet
    with pytest.raises(ExtensionError, match="the native extension is not built") as raised:
        hybridsql.load(apsw.Connection(":memory:"), "extension")
    assert caplog.records == []
    assert hybridsql.load(apsw.Connection(":memory:")) == "numpy"
    assert hybridsql.load(apsw.Connection(":memory:")) == "numpy"
    said = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [
        (
            "hybridsql",
            "WARNING",
            f"hybridsql: the native extension did not load into apsw ({raised.value.__cause__}),"
            " so its connections have hybridsql's SQL functions in Python but no vector_index"
            " tables (a query of an index's vectors fails, and Datasette cannot open an index) and"
            " no bm25_candidate()",
        )
    ]


def test_where_pysqlite3_has_no_wheel_the_line_says_so_and_what_to_do(monkeypatch):
    """On Linux aarch64 (no pysqlite3 wheel), a sqlite3 without enable_load_extension."""
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(platform, "system", lambda: "Linux")
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    line = hybridsql.db.extension.python_only(sqlite3.connect(":memory:"), AttributeError())
    assert line == (
        "hybridsql: Python's sqlite3 cannot load extensions (this Python was built without them),"
        " so its connections have hybridsql's SQL functions in Python but no vector_index tables"
        " (a query of an index's vectors fails, and Datasette cannot open an index) and no"
        " bm25_candidate(); pysqlite3, which sqlite-utils and Datasette would use instead, has no"
        " wheel for Linux aarch64: `pip install pysqlite3` compiles it (with a C compiler and"
        " SQLite's headers), or use a Python whose sqlite3 loads extensions. The hybridsql command"
        " and apsw have everything."
    )


# -- cosine_topk against brute force -----------------------------------------------------------


def random_table(conn, n=3000, d=48, seed=7):
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, d)).astype(np.float32)
    vectors[5] = 0.0  # a zero vector scores 0.0
    vectors[11] = vectors[10]  # an exact tie, broken by id
    conn.execute("create table v(id integer primary key, project int, vector blob)")
    with conn:
        conn.executemany(
            "insert into v values (?, ?, ?)",
            [(i, i % 10, vectors[i].tobytes()) for i in range(n)],
        )
    conn.execute("update v set vector = NULL where id = 99")
    return vectors


def brute_force(vectors, q, k, keep):
    v64, q64 = vectors.astype(np.float64), q.astype(np.float64)
    norms = np.linalg.norm(v64, axis=1) * np.linalg.norm(q64)
    scores = np.divide(v64 @ q64, norms, out=np.zeros(len(v64)), where=norms > 0)
    rows = [(-scores[i], i) for i in range(len(vectors)) if keep(i)]
    return [(i, -s) for s, i in sorted(rows)[:k]]


@pytest.mark.parametrize("backend", ["extension", "numpy", "numpy-math", "python"])
@pytest.mark.parametrize(
    "where,keep",
    [
        ("", lambda i: i != 99),
        ("where project = 3", lambda i: i % 10 == 3),
        ("where id between 8 and 12", lambda i: 8 <= i <= 12),
    ],
)
def test_topk_matches_brute_force(backend, where, keep):
    conn = apsw_conn(backend)
    vectors = random_table(conn)
    q = vectors[10] + 0.01
    for k in (1, 10, 50):
        got = json.loads(
            conn.execute(
                f"select cosine_topk(?, ?, id, vector) from v {where}", (q.tobytes(), k)
            ).fetchone()[0]
        )
        want = brute_force(vectors, q, k, keep)
        assert [i for i, _ in got] == [i for i, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-9)
    if where == "":
        top = json.loads(
            conn.execute(
                "select cosine_topk(?, 3, id, vector) from v", (vectors[10].tobytes(),)
            ).fetchone()[0]
        )
        assert [i for i, _ in top[:2]] == [10, 11]  # equal scores, lower id first


def cpu_flags():
    """The CPU's feature flags, as Linux lists them in /proc/cpuinfo; none where it cannot."""
    try:
        with open("/proc/cpuinfo") as f:
            return {flag for line in f if line.startswith("flags") for flag in line.split()[2:]}
    except OSError:
        return set()


X86_64 = platform.machine().lower() in ("x86_64", "amd64")
AVX2 = X86_64 and {"avx2", "fma"} <= cpu_flags()


@pytest.mark.parametrize(
    "simd",
    [
        "generic",
        pytest.param(
            "sse2",
            marks=pytest.mark.skipif(
                not X86_64,
                reason=f"the SSE2 path is built on x86-64 only, not {platform.machine()}",
            ),
        ),
        pytest.param(
            "avx2",
            marks=pytest.mark.skipif(
                not AVX2,
                reason="the CPU has no AVX2 and FMA (per /proc/cpuinfo): the AVX2 path cannot run",
            ),
        ),
    ],
)
def test_every_simd_path_gives_the_same_scores(simd):
    rng = np.random.default_rng(3)
    q, rows = rng.standard_normal(37), rng.standard_normal((20, 37))
    values = ", ".join(f"({i}, '{json.dumps(r.tolist())}')" for i, r in enumerate(rows))
    sql = f"with t(id, v) as (values {values}) select cosine_topk('{json.dumps(q.tolist())}', 20, id, v) from t"
    out, err = run_shell(sql, env={**os.environ, "HYBRIDSQL_SIMD": simd})
    assert not err
    got = json.loads(next(iter(out[0].values())))
    want = brute_force(rows.astype(np.float32), q.astype(np.float32), 20, lambda i: True)
    assert [i for i, _ in got] == [i for i, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-12)
    path = "avx2+fma" if simd == "avx2" else simd
    debug, _ = run_shell(
        "select hybridsql_debug() as d, hybridsql_simd() as s",
        env={**os.environ, "HYBRIDSQL_SIMD": simd},
    )
    assert f"simd {path}" in debug[0]["d"] and debug[0]["s"] == path


# -- the build and the C library's environment ----------------------------------------------


def test_the_library_exports_its_entry_point_and_the_kernels_alone():
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed: the exported symbols cannot be listed")
    out = subprocess.run(
        [nm, "-D", "--defined-only", hybridsql.loadable_path()],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    exported = sorted(line.split()[-1] for line in out.splitlines())
    # The kernels _native.py declares, and SQLite's entry point: the list test_build.py pins.
    declared = re.findall(r"(\w+)\(", hybridsql.db._native.CDEF)
    assert exported == sorted([*declared, "sqlite3_hybridsql_init"])


def test_loading_twice_keeps_working_and_failures_are_named():
    path = hybridsql.loadable_path()
    proc = subprocess.run(
        [SHELL, ":memory:", f".load {path}", f".load {path}", "select hybridsql_version()"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert (proc.stdout, proc.stderr) == (f"{hybridsql.__version__}\n", "")
    # SQLite refuses to replace a function while a statement runs: the error says which.
    conn = hybridsql.connect(":memory:")
    running = conn.execute("select bm25_score(-value) from json_each('[1, 2, 3]')")
    next(running)
    conn.enable_load_extension(True)
    message = (
        "hybridsql: cannot register cosine_similarity:"
        " unable to delete/modify user-function due to active statements"
    )
    with pytest.raises(apsw.ExtensionLoadingError, match=re.escape(message)):
        # the binary apsw's SQLite was given (pysqlite3's may hold the package's own)
        conn.load_extension(hybridsql.db.extension._binary_for(conn))


COMMA_LOCALE = "de_DE.UTF-8"

LOCALE_SCRIPT = """
import locale, sys
locale.setlocale(locale.LC_ALL, "")
assert locale.localeconv()["decimal_point"] == ",", locale.localeconv()["decimal_point"]
import apsw, hybridsql
conn = apsw.Connection(":memory:")
assert hybridsql.load(conn, sys.argv[1]) == sys.argv[1]
print(repr(conn.execute(
    "select vector_json('[0.5, 2.25]'), cosine_similarity('[0.5,1]', '[1,0.5]'),"
    " cosine_topk('[1,0.5]', 1, 7, '[0.5,1]'), vector_json(vector_blob('[1e-7, 3.25e12]'))"
).fetchone()))
try:
    conn.execute("select bm25_score(-1, -0.5)").fetchall()
except Exception as e:
    print(e)
"""


@pytest.fixture(scope="module")
def comma_locale(tmp_path_factory):
    """LOCPATH of a compiled de_DE.UTF-8 locale (decimal comma), made with localedef."""
    localedef = shutil.which("localedef")
    if localedef is None:
        pytest.skip("localedef is not installed: no comma-decimal locale can be made here")
    where = tmp_path_factory.mktemp("locale")
    proc = subprocess.run(
        [localedef, "-i", "de_DE", "-f", "UTF-8", str(where / COMMA_LOCALE)],
        capture_output=True,
        text=True,
        check=False,
    )
    if not (where / COMMA_LOCALE).exists():
        pytest.skip(f"localedef cannot make {COMMA_LOCALE} here: {proc.stderr.strip()}")
    return str(where)


@pytest.mark.parametrize("backend", ["extension", "python"])
def test_numbers_do_not_follow_a_comma_decimal_locale(comma_locale, backend):
    env = {**os.environ, "LOCPATH": comma_locale, "LC_ALL": COMMA_LOCALE}
    proc = subprocess.run(  # run away from the checkout, which would shadow the installed package
        [sys.executable, "-c", LOCALE_SCRIPT, backend],
        capture_output=True,
        text=True,
        env=env,
        cwd=comma_locale,
        check=True,
        timeout=60,
    )
    values, error = proc.stdout.splitlines()
    assert values == repr(("[0.5,2.25]", 0.8, "[[7,0.80000000000000004]]", "[1e-07,3.25e+12]"))
    assert error == "bm25_score(): 2nd argument saturation must be > 0, got -0.5"


# One process, several SQLite libraries: apsw's, and pysqlite3's or Python's sqlite3, are each a
# build of their own. The extension's pointer to SQLite's routines is one per binary: loaded into
# two libraries, the second redirected the first one's calls (Datasette's server died with
# "free(): invalid pointer" while the search page used apsw).

TWO_LIBRARIES = """
import apsw, sys, threading
import pysqlite3.dbapi2 as pysqlite3
import hybridsql
from hybridsql.db import extension
a = hybridsql.connect(":memory:", backend="extension")
p = pysqlite3.connect(":memory:", check_same_thread=False)
assert extension.load(p) == "extension"
sql = "select vector_json(vector_blob('[1,2.5]')), hybridsql_debug()"
def work(conn):
    for _ in range(3000):
        assert conn.execute(sql).fetchall()[0][0] == "[1,2.5]"
threads = [threading.Thread(target=work, args=(c,)) for c in (a, p)]
for t in threads: t.start()
for t in threads: t.join()
print(sorted(extension._COPIES), extension._COPIES["apsw"] != extension._COPIES["pysqlite3"])
print(a.execute(sql).fetchall()[0][1].split("; ")[3], p.execute(sql).fetchall()[0][1].split("; ")[3])
"""


def test_each_sqlite_library_in_a_process_gets_its_own_copy(tmp_path):
    pytest.importorskip("pysqlite3", reason="pysqlite3-binary is Linux x86-64 only")
    out = subprocess.run(
        [sys.executable, "-c", TWO_LIBRARIES],
        cwd=tmp_path,  # not the checkout, whose hybridsql/ is the uncompiled source
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "['apsw', 'pysqlite3'] True"
    assert lines[1] == f"sqlite {apsw.sqlite_lib_version()} sqlite {_pysqlite3_version()}"


def _pysqlite3_version():
    import pysqlite3.dbapi2

    return pysqlite3.dbapi2.sqlite_version


# A second library's copy, then the process ends as a service manager stops a server: SIGTERM,
# whose default action runs no exit handlers.
COPY_THEN_SIGTERM = """
import os, signal, sys
import pysqlite3.dbapi2 as pysqlite3
import hybridsql
from hybridsql.db import extension
a = hybridsql.connect(":memory:", backend="extension")
p = pysqlite3.connect(":memory:")
assert extension.load(p) == "extension"
print(extension._COPIES["pysqlite3"])
print(p.execute("select vector_json(vector_blob('[1,2.5]'))").fetchone()[0], flush=True)
if sys.argv[1] == "term":
    os.kill(os.getpid(), signal.SIGTERM)
"""


def _copy_then(tmp_path, cache, how):
    """Runs COPY_THEN_SIGTERM (ended by SIGTERM or by its end, ``how``) with its temporary
    folder in tmp_path/tmp and HYBRIDSQL_CACHE_DIR ``cache``: its copy's path, and what the
    temporary folder holds after."""
    temporary = tmp_path / "tmp"
    temporary.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(temporary), "HYBRIDSQL_CACHE_DIR": str(cache)}
    out = subprocess.run(
        [sys.executable, "-c", COPY_THEN_SIGTERM, how],
        cwd=tmp_path,  # not the checkout, whose hybridsql/ is the uncompiled source
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    expected = -15 if how == "term" else 0
    assert out.returncode == expected, out.stderr
    path, answer = out.stdout.splitlines()
    assert answer == "[1,2.5]"
    return path, sorted(os.listdir(temporary))


def test_a_second_librarys_copy_is_shared_and_left_nowhere_by_a_process_killed_by_sigterm(
    tmp_path,
):
    pytest.importorskip("pysqlite3", reason="pysqlite3-binary is Linux x86-64 only")
    from hybridsql.db.extension import loadable_path

    with open(loadable_path(), "rb") as f:
        binary = f.read()
    cache = tmp_path / "cache"
    first, left = _copy_then(tmp_path, cache, "term")
    assert left == []  # a copy in a temporary folder of its own stayed here at every such stop
    assert os.path.dirname(os.path.dirname(first)) == str(cache / "libraries")
    with open(first, "rb") as f:
        assert f.read() == binary
    again, left = _copy_then(tmp_path, cache, "term")
    assert (again, left) == (first, [])
    assert os.listdir(cache / "libraries") == [os.path.basename(os.path.dirname(first))]
    assert sorted(os.listdir(os.path.dirname(first))) == [os.path.basename(first)]

    # A copy whose bytes are not the binary's (cut short here) is written again before it loads.
    with open(first, "r+b") as f:
        f.truncate(len(binary) // 2)
    again, left = _copy_then(tmp_path, cache, "term")
    assert (again, left) == (first, [])
    with open(first, "rb") as f:
        assert f.read() == binary


def test_where_the_cache_cannot_be_written_the_copy_is_temporary_and_removed_at_exit(tmp_path):
    pytest.importorskip("pysqlite3", reason="pysqlite3-binary is Linux x86-64 only")
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file where the cache folder would be")
    path, left = _copy_then(tmp_path, not_a_folder, "exit")
    assert path.startswith(str(tmp_path / "tmp" / "hybridsql-"))
    assert left == []
    assert not_a_folder.read_text() == "a file where the cache folder would be"


ONE_BINARY_TWICE = """
import apsw, pysqlite3.dbapi2 as pysqlite3
from hybridsql.db.extension import loadable_path
a = apsw.Connection(":memory:"); a.enable_load_extension(True); a.load_extension(loadable_path())
p = pysqlite3.connect(":memory:"); p.enable_load_extension(True)
try:
    p.load_extension(loadable_path())
except pysqlite3.Error as e:
    print(e)
print(a.execute("select hybridsql_debug()").fetchall()[0][0].split("; ")[3])
"""


def test_one_binary_in_two_sqlite_libraries_is_refused(tmp_path):
    """Loading the package's binary by hand into a second library is refused in one line; the
    first library keeps it."""
    pytest.importorskip("pysqlite3", reason="pysqlite3-binary is Linux x86-64 only")
    out = subprocess.run(
        [sys.executable, "-c", ONE_BINARY_TWICE],
        cwd=tmp_path,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "error during initialization: hybridsql: already loaded into another SQLite library in"
        f" this process (SQLite"
        f" {apsw.sqlite_lib_version()}): one process can give the extension to one SQLite"
        " library only",
        f"sqlite {apsw.sqlite_lib_version()}",
    ]


@pytest.mark.parametrize("readonly", [False, True])
def test_opening_waits_for_a_connection_that_holds_the_file(tmp_path, readonly):
    """Opening reads the file at once (to refuse a non-database); it must wait on the busy
    timeout like every later statement. Under CI's sanitizer run, writers opening the index
    while another closed it (the last close checkpoints the WAL) died with 'locked'."""
    import threading

    path = str(tmp_path / "held.db")
    holder = apsw.Connection(path)  # a rollback journal: an exclusive lock keeps readers out
    holder.execute("create table t(x); begin exclusive; insert into t values (1)")
    waited = threading.Event()

    class Watching(apsw.VFS):
        """The default VFS, telling when SQLite sleeps: its busy handler waits on a lock."""

        def __init__(self):
            super().__init__("watching", base="", makedefault=True)

        def xSleep(self, microseconds):
            waited.set()
            return super().xSleep(microseconds)

    def release():  # once the opening below has met the lock and waits on it, whatever the load
        assert waited.wait(120), "the opening never waited on the lock"
        holder.execute("commit")
        holder.close()

    watching = Watching()
    thread = threading.Thread(target=release)
    thread.start()
    try:
        conn = hybridsql.connect(path, readonly=readonly)
    finally:
        thread.join()
        watching.unregister()
    assert waited.is_set()
    assert conn.execute("select count(*) from t").fetchone() == (1,)


def test_the_kernels_cdef_is_the_headers():
    """_native.py's cffi declarations (ABI mode: nothing checks them at build time) are those of
    csrc/hybridsql.h, which the C compiles against."""
    from hybridsql.db import _native

    def declarations(text: str) -> list:  # a declaration may go on over lines
        return [" ".join(d.split()) for d in text.split(";") if "(" in d]

    header = os.path.join(os.path.dirname(__file__), "..", "csrc", "hybridsql.h")
    with open(header) as f:
        exported = re.findall(r"^HS_EXPORT ([^;]*;)", f.read(), re.M)
    declared = declarations("".join(exported))
    assert declared and declared == declarations(_native.CDEF)
