"""atheris harness: the Python SQL functions against the C extension, on the same arguments.

hybridsql/db/functions.py promises the semantics and error texts of csrc/functions/. Each input
picks a statement, a Python math (numpy's: the C kernels through cffi; numpy itself; pure
Python) and bound values (NULL, interesting and
raw integers and doubles, NaN, infinities, text, blobs of any length, float32 blobs, JSON of any
shape, dates and paths, vectors of one dimension per input, rows of mixed dimensions for
cosine_topk, huge k), runs it on two connections, one with the native extension and one with
the Python functions, and requires the same answer (floats to 1e-9) or the same error text, and
never NaN or an infinity.

Run it: see fuzz/README.md.
"""

import json
import math
import struct
import sys

import atheris

with atheris.instrument_imports(include=["hybridsql"]):
    import apsw

    from hybridsql.db.extension import load, register_python
    from hybridsql.db.functions import Functions, NumpyMath, PythonMath, make_math

# fmt: off
INTS = [0, 1, -1, 2, 3, 5, 10000, 10001, 65536, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]
DOUBLES = [0.0, -0.0, 1.0, -1.0, 0.5, -4.2, 1e-300, 5e-324, 1e308, -1e308, math.inf, -math.inf,
           math.nan, 3.5e38, 1e39, 30.0, 1763683200.0, -1e18, 1.7976931348623157e308,
           -1.7976931348623157e308, 1e-320, 1.5, -1.5]
FLOATS = [0.0, -0.0, 1.0, -1.0, 0.1, 3.4028234663852886e38, 1.1754943508222875e-38, 1e-45,
          math.inf, -math.inf, math.nan, 3.0, -2.5]
NUMBERS = ["0", "-0", "1", "-1", "0.1", "1e3", "1E-3", "-2.5e+2", "1e39", "1e-50",
           "3.4028235e38", "3.4028236e38", "NaN", "Infinity", "-", "1.", ".5", "01", "1e",
           "1e999", "", "null", "2e-45", "9" * 511, "9" * 512]
SEPARATORS = [",", ", ", " , ", "\t,\n", "", ",,", "]", "[", " ", "\r\n"]
TIMES = ["2026-11-21", "2026-11-21T12:34", "2026-11-21T12:34:56.789Z",
         "2026-11-21 00:00:00+05:30", "2024-02-29", "2026-02-29", "2026-13-01",
         "2026-11-21T24:00", "2026-11-21+0100", "2026-11-21T12:34+0100", "2026-11-21T12:34:56.",
         "memory/2026-10-22.md", "a\\2026-10-22.md", "memory/2026-10-22.mdx", "", "x/0000-01-01.md"]
# fmt: on

STATEMENTS = [
    ("select cosine_similarity(?, ?)", 2),
    ("select bm25_score(?)", 1),
    ("select bm25_score(?, ?)", 2),
    ("select hybrid_score(?, ?)", 2),
    ("select hybrid_score(?, ?, ?, ?)", 4),
    ("select hybrid_score(?, ?, ?, ?, ?)", 5),
    ("select temporal_decay(?, ?)", 2),
    ("select temporal_decay(?, ?, ?)", 3),
    ("select vector_blob(?)", 1),
    ("select vector_json(?)", 1),
    ("select cosine_topk(?, ?, id, v) from rows", 2),
    ("select cosine_topk(q, k, id, v) from rows", 0),
]
MATHS = {"cffi": make_math("numpy"), "numpy": NumpyMath(), "python": PythonMath()}
BACKENDS = list(MATHS)


def connection(math_) -> apsw.Connection:
    conn = apsw.Connection(":memory:")
    if math_ is None:
        load(conn, "extension")
    else:
        register_python(conn, Functions(math_))
    conn.execute("create table rows(id, q, k, v)")
    return conn


NATIVE = connection(None)
PYTHON = {name: connection(math_) for name, math_ in MATHS.items()}


def floats_blob(values) -> bytes:
    values = list(values)
    return struct.pack(f"<{len(values)}f", *values)


def make_value(fdp, dims: int):
    kind = fdp.ConsumeIntInRange(0, 12)
    if kind == 0:
        return None
    if kind == 1:
        return (
            INTS[fdp.ConsumeIntInRange(0, len(INTS) - 1)]
            if fdp.ConsumeBool()
            else (fdp.ConsumeInt(8))
        )
    if kind == 2:
        return (
            DOUBLES[fdp.ConsumeIntInRange(0, len(DOUBLES) - 1)]
            if fdp.ConsumeBool()
            else (fdp.ConsumeFloat())
        )
    if kind == 3:
        return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 64))
    if kind == 4:
        return fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64))
    if kind == 5:
        n = fdp.ConsumeIntInRange(0, 17)
        return floats_blob(FLOATS[fdp.ConsumeIntInRange(0, len(FLOATS) - 1)] for _ in range(n))
    if kind == 6:
        n = fdp.ConsumeIntInRange(0, 12)
        parts = ["[" if fdp.ConsumeIntInRange(0, 7) else ""]
        for i in range(n):
            parts.append(NUMBERS[fdp.ConsumeIntInRange(0, len(NUMBERS) - 1)])
            if i + 1 < n:
                parts.append(SEPARATORS[fdp.ConsumeIntInRange(0, len(SEPARATORS) - 1)])
        parts.append("]" if fdp.ConsumeIntInRange(0, 7) else "")
        return "".join(parts)
    if kind == 7:
        return TIMES[fdp.ConsumeIntInRange(0, len(TIMES) - 1)]
    if kind == 8 and fdp.ConsumeIntInRange(0, 15) == 0:
        return floats_blob([1.0] * fdp.ConsumeIntInRange(65535, 65537))  # around HS_MAX_DIMS
    values = [fdp.ConsumeFloatInRange(-1e3, 1e3) for _ in range(dims)]
    if kind <= 10:  # vectors of the input's dimension, as blobs or JSON
        return floats_blob(values)
    return "[" + ", ".join(repr(v) for v in values) + "]"


def run(conn, sql: str, params, rows):
    """('ok', value) or ('error', message) of one statement, after loading rows if it reads them."""
    if "rows" in sql:
        with conn:
            conn.execute("delete from rows")
            conn.executemany("insert into rows values (?, ?, ?, ?)", rows)
    try:
        return "ok", conn.execute(sql, params).fetchall()[0][0]
    except apsw.SQLError as e:
        return "error", str(e).removeprefix("SQLError: ")
    except ValueError as e:  # the Python functions raise SQLFunctionError, a ValueError
        return "error", str(e)


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, str) and isinstance(b, str) and a.startswith("[["):
        x, y = json.loads(a), json.loads(b)
        return len(x) == len(y) and all(
            i == j and math.isclose(s, t, rel_tol=1e-9, abs_tol=1e-12)
            for (i, s), (j, t) in zip(x, y, strict=True)
        )
    return a == b


def finite(sql: str, params, answer) -> bool:
    """No SQL function returns NaN or an infinity (SQLite turns a NaN result into NULL, so a
    score function's NULL where its arguments are not NULL counts as one)."""
    status, value = answer
    if status != "ok" or isinstance(value, float):
        return status != "ok" or math.isfinite(value)
    if sql.startswith(("select bm25_score", "select hybrid_score")):
        return False
    # SQLite binds a NaN as NULL, so a NaN argument is a NULL one
    nulls = [p is None or (isinstance(p, float) and math.isnan(p)) for p in params[:2]]
    return not sql.startswith("select temporal_decay") or any(nulls)


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    sql, nparams = STATEMENTS[fdp.ConsumeIntInRange(0, len(STATEMENTS) - 1)]
    backend = BACKENDS[fdp.ConsumeIntInRange(0, len(BACKENDS) - 1)]
    dims = fdp.ConsumeIntInRange(1, 8)
    rows = []
    if "rows" in sql:
        for _ in range(fdp.ConsumeIntInRange(0, 8)):
            row_id = fdp.ConsumeIntInRange(-3, 20) if fdp.ConsumeBool() else make_value(fdp, dims)
            rows.append(
                (row_id, make_value(fdp, dims), make_value(fdp, dims), make_value(fdp, dims))
            )
    params = [make_value(fdp, dims) for _ in range(nparams)]
    want = run(NATIVE, sql, params, rows)
    got = run(PYTHON[backend], sql, params, rows)
    if not finite(sql, params, want) or not finite(sql, params, got):
        raise AssertionError(f"{sql} {params!r}: C gives {want!r}, Python gives {got!r}")
    if want[0] != got[0] or not same(want[1], got[1]):
        raise AssertionError(
            f"{sql} {params!r} rows={rows!r} backend={backend}: "
            f"C gives {want!r}, Python gives {got!r}"
        )


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
