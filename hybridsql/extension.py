"""Loading the SQL functions into a connection: the native extension, or Python in its place."""

import os
import sqlite3

import apsw

from hybridsql.errors import ExtensionError
from hybridsql.functions import Functions, make_math

# The backends, one name each, here and in searches (SearchOptions.backend): the native
# extension inside SQLite, or Python (with numpy and the C kernels through cffi, or pure).
BACKENDS = ("auto", "extension", "numpy", "python")

# (SQL name, number of arguments) of every scalar function; cosine_topk is the aggregate.
SCALARS = (
    ("cosine_similarity", 2),
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
)


def loadable_path() -> str:
    """Path of the SQLite loadable extension (``.load`` it in any SQLite client)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hybridsql.so")
    if not os.path.exists(path):
        raise ExtensionError(
            f"the native extension is not built ({path} is missing); reinstall with `pip install .`"
        )
    return path


def load(conn, backend: str = "auto") -> str:
    """Adds every hybridsql SQL function to an apsw or sqlite3 connection.

    ``auto`` loads the native extension and, where the connection cannot load extensions
    (Python's sqlite3 built without ``enable_load_extension``), registers Python versions of the
    same functions (``numpy``: the C kernels through cffi when built, else numpy). Returns the
    name of the backend that answers: ``extension``, ``numpy`` or ``python``. Only the extension
    has the ``vector_index`` tables and FTS5's ``bm25_candidate()``.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if backend in ("auto", "extension"):
        try:
            _load_native(conn)
            return "extension"
        except (ExtensionError, AttributeError, apsw.Error, sqlite3.Error) as e:
            if backend == "extension":
                raise ExtensionError(f"cannot load the native extension: {e}") from e
    vmath = make_math("numpy" if backend in ("auto", "extension") else backend)
    register_python(conn, Functions(vmath))
    return vmath.name


def _load_native(conn) -> None:
    path = loadable_path()
    conn.enable_load_extension(True)
    try:
        # No entry point: SQLite derives sqlite3_hybridsql_init from the file name, and Python's
        # sqlite3 takes none before 3.12.
        conn.load_extension(path)
    finally:
        conn.enable_load_extension(False)


def register_python(conn, functions: Functions) -> None:
    """Registers the Python implementations on an apsw or sqlite3 connection."""
    if isinstance(conn, apsw.Connection):
        version = apsw.sqlite_lib_version()
        for name, nargs in SCALARS:
            conn.create_scalar_function(name, getattr(functions, name), nargs, deterministic=True)
        conn.create_scalar_function(
            "hybridsql_debug", lambda: functions.hybridsql_debug(version), 0
        )
        conn.create_aggregate_function("cosine_topk", _apsw_aggregate(functions), 4)
        return
    version = sqlite3.sqlite_version
    for name, nargs in SCALARS:
        conn.create_function(name, nargs, getattr(functions, name), deterministic=True)
    conn.create_function("hybridsql_debug", 0, lambda: functions.hybridsql_debug(version))
    conn.create_aggregate("cosine_topk", 4, _sqlite3_aggregate(functions))


def _apsw_aggregate(functions: Functions):
    def factory():
        state = functions.topk()
        return state, lambda _, *args: state.step(*args), lambda _: state.final()

    return factory


def _sqlite3_aggregate(functions: Functions):
    class Aggregate:
        def __init__(self):
            self.state = functions.topk()

        def step(self, *args):
            self.state.step(*args)

        def finalize(self):
            return self.state.final()

    return Aggregate


def connect(path: str, backend: str = "auto", busy_timeout_ms: int = 10000) -> apsw.Connection:
    """An apsw connection with hybridsql loaded, in WAL mode with a busy timeout."""
    conn = apsw.Connection(path)
    conn.set_busy_timeout(busy_timeout_ms)
    if path not in ("", ":memory:") and not path.startswith("file::memory:"):
        conn.execute("pragma journal_mode = wal")
    conn.execute("pragma synchronous = normal; pragma foreign_keys = on")
    load(conn, backend)
    return conn


def backend_of(conn) -> str:
    """Which backend answers the hybridsql functions on ``conn``."""
    cursor = conn.cursor() if isinstance(conn, apsw.Connection) else conn
    debug = cursor.execute("select hybridsql_debug()").fetchone()[0]
    return debug.split("; backend ")[1].split(";")[0]
