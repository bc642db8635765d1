"""Loading the SQL functions into a connection: the native extension, or Python in its place."""

from __future__ import annotations

import contextlib
import os
import sys
import threading

import apsw

from hybridsql.db import _native
from hybridsql.errors import DatabaseError, ExtensionError

TYPE_CHECKING = False  # as in __init__.py: typing is not imported for it
if TYPE_CHECKING:
    import sqlite3
    from pathlib import Path

    from hybridsql.db.functions import Functions

# A new process's first connect imports no more than this: the Python functions, logging,
# sqlite3 and what copies a library are imported where they are used.

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
    ("hybridsql_simd", 0),
)


# pysqlite3, which sqlite-utils and Datasette import in place of Python's sqlite3 when it is
# installed, has wheels that load extensions (0.6.1) for these (sys.platform, machine) pairs.
PYSQLITE3_WHEELS = {("linux", "x86_64"), ("darwin", "arm64"), ("win32", "amd64"), ("win32", "x86")}

_SAID: set = set()
_SAID_LOCK = threading.Lock()


def say_once(message: str) -> None:
    """Logs ``message`` as a warning of the ``hybridsql`` logger the first time in this process,
    never again. Where logging is not set up, Python prints it alone on stderr."""
    with _SAID_LOCK:
        if message in _SAID:
            return
        _SAID.add(message)
    import logging

    logging.getLogger("hybridsql").warning(message)


def python_only(conn, error: Exception) -> str:
    """One line: why ``conn`` got the Python functions in place of the extension, what it lacks,
    and what to do. SQLite's own error ("no such module: vector_index") cannot say it."""
    module = "apsw" if isinstance(conn, apsw.Connection) else type(conn).__module__.split(".")[0]
    lacks = (
        "so its connections have hybridsql's SQL functions in Python but no vector_index tables"
        " (a query of an index's vectors fails, and Datasette cannot open an index) and no"
        " bm25_candidate()"
    )
    if not isinstance(error, AttributeError):  # the module has enable_load_extension
        return f"hybridsql: the native extension did not load into {module} ({error}), {lacks}"
    import platform

    if (sys.platform, platform.machine().lower()) in PYSQLITE3_WHEELS:
        fix = "`pip install pysqlite3` gives sqlite-utils and Datasette a sqlite3 that can"
    else:
        fix = (
            f"pysqlite3, which sqlite-utils and Datasette would use instead, has no wheel for"
            f" {platform.system()} {platform.machine()}: `pip install pysqlite3` compiles it (with"
            " a C compiler and SQLite's headers), or use a Python whose sqlite3 loads extensions"
        )
    name = "Python's sqlite3" if module == "sqlite3" else module
    return (
        f"hybridsql: {name} cannot load extensions (this Python was built without them), {lacks};"
        f" {fix}. The hybridsql command and apsw have everything."
    )


def loadable_path() -> str:
    """Path of the SQLite loadable extension (``.load`` it in any SQLite client)."""
    path = _native.PATH
    if not os.path.exists(path):
        raise ExtensionError(library_missing(path))
    return path


def library_missing(path: str) -> str:
    """The one line that says the native extension ``path`` is missing, why, and what to do. In a
    checkout, Python run from its root imports the uncompiled source folder before the installed
    package."""
    package = os.path.dirname(path)
    if os.path.isfile(os.path.join(os.path.dirname(package), "csrc", "hybridsql.c")):
        return (
            f"hybridsql was imported from its source folder {package}, where the native extension"
            f" is not built ({os.path.basename(path)}): run Python from another folder to use the"
            " installed package, or build it in place with `pip install -e .`"
        )
    return f"the native extension is not built ({path} is missing); reinstall with `pip install .`"


def load(conn: apsw.Connection | sqlite3.Connection, backend: str = "auto") -> str:
    """Adds every hybridsql SQL function to an apsw or sqlite3 connection.

    ``auto`` loads the native extension and, where the connection cannot load extensions
    (Python's sqlite3 built without ``enable_load_extension``), registers Python versions of the
    same functions (``numpy``: the C kernels through cffi when built, else numpy). Returns the
    name of the backend that answers: ``extension``, ``numpy`` or ``python``. Only the extension
    has the ``vector_index`` tables and FTS5's ``bm25_candidate()``.
    """
    if backend not in ("auto", "extension"):
        from hybridsql.db.functions import BACKENDS

        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    else:
        # A sqlite3 connection's module is imported already; apsw's needs no sqlite3.
        module = sys.modules.get("sqlite3")
        errors = (ExtensionError, AttributeError, apsw.Error, *([module.Error] if module else []))
        try:
            _load_native(conn)
            return "extension"
        except errors as e:
            if backend == "extension":
                raise ExtensionError(f"cannot load the native extension: {e}") from e
            say_once(python_only(conn, e))
    from hybridsql.db.functions import Functions, make_math

    vmath = make_math("numpy" if backend in ("auto", "extension") else backend)
    register_python(conn, Functions(vmath))
    return vmath.name


def cache_dir() -> Path:
    """Where hybridsql keeps what it can make again: ``$HYBRIDSQL_CACHE_DIR``, else the
    platform's user cache folder (``$XDG_CACHE_HOME/hybridsql``, ``~/.cache/hybridsql``). The
    extension looks for its model file there too (csrc/model/embedsql.c), and keeps there the copies
    of its binary that other SQLite libraries load (_private_copy)."""
    from pathlib import Path

    chosen = os.environ.get("HYBRIDSQL_CACHE_DIR")
    if chosen:
        return Path(chosen)
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "hybridsql" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "hybridsql"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hybridsql"


# The SQLite library of each kind of connection (apsw's, Python's sqlite3, pysqlite3 may each be
# a build of their own) -> the copy of the extension loaded into it. The extension's pointer to
# SQLite's routines is one for the whole binary, so a second library gets a copy of its own.
_COPIES: dict = {}
_COPIES_LOCK = threading.Lock()


def _binary_for(conn) -> str:
    """The extension's binary for ``conn``'s SQLite library: the package's own for the first
    library that loads it, a copy of its own (``_private_copy``: same file name, so the same
    entry point) for each other."""
    library = "apsw" if isinstance(conn, apsw.Connection) else type(conn).__module__.split(".")[0]
    with _COPIES_LOCK:
        if library not in _COPIES:
            path = loadable_path()
            _COPIES[library] = _private_copy(path, library) if _COPIES else path
        return _COPIES[library]


def _private_copy(source: str, library: str) -> str:
    """A copy of the binary ``source`` for the SQLite library ``library``: a file of its own,
    which the dynamic loader maps as another library. Kept in the user's cache folder under the
    binary's hash and the library's name, and shared by every process of this build, so that
    none leaves one behind: a server stopped by SIGTERM (Datasette's, as a service manager stops
    it) runs no exit handlers, and a copy in a temporary folder of its own stayed there at each
    stop. Its bytes are compared with the binary's before each use, and written again when they
    differ. Where the cache folder cannot be written, a temporary folder removed at exit."""
    import hashlib
    import shutil
    import tempfile

    with open(source, "rb") as f:
        data = f.read()
    folder = cache_dir() / "libraries" / f"{library}-{hashlib.sha256(data).hexdigest()[:16]}"
    path = folder / _native.LIBRARY
    with contextlib.suppress(OSError):
        if path.read_bytes() == data:
            return str(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, part = tempfile.mkstemp(dir=folder, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            shutil.copymode(source, part)
            os.replace(part, path)  # whole, for a process that reads it at the same time
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(part)
            raise
        return str(path)
    except OSError:
        import atexit

        temporary = tempfile.mkdtemp(prefix="hybridsql-")
        atexit.register(shutil.rmtree, temporary, True)
        return shutil.copy(source, os.path.join(temporary, _native.LIBRARY))


def _load_native(conn) -> None:
    path = _binary_for(conn)
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
            "hybridsql_debug", lambda *_: functions.hybridsql_debug(version), 0
        )
        conn.create_aggregate_function("cosine_topk", _apsw_aggregate(functions), 4)
        return
    import sqlite3

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


# The most a connection's page cache holds, in KiB (SQLite's default is 2 MiB): a search reads
# the candidates' rows, their recall history, the FTS5 segments and the vectors it rescores all
# over the file, and at 2 MiB a search of the server bench's index (2,000 memories) read its
# 800 pages from the file again every time. Pages are cached as they are read, so a small file
# takes less; at 8 MiB, 256 open indexes hold at most 2 GiB.
CACHE_KIB = 8 * 1024


def connect(
    path: str,
    backend: str = "auto",
    busy_timeout_ms: int = 10000,
    readonly: bool = False,
    create: bool = True,
) -> apsw.Connection:
    """An apsw connection with hybridsql loaded, in WAL mode with a busy timeout and a page
    cache of up to CACHE_KIB.

    ``readonly`` opens with SQLITE_OPEN_READONLY and leaves the journal mode as it is (on a
    read-only file system, the file is read as immutable); ``create=False`` refuses a file that
    does not exist instead of creating it. A file that cannot be opened raises a DatabaseError
    that says why.
    """
    memory = path in ("", ":memory:") or path.startswith("file::memory:")
    if readonly:
        flags = apsw.SQLITE_OPEN_READONLY
    else:
        flags = apsw.SQLITE_OPEN_READWRITE | (apsw.SQLITE_OPEN_CREATE if create else 0)
    conn = None
    try:
        try:
            conn = apsw.Connection(path, flags=flags)
            # Before the first read: another connection may hold the file for a moment (its
            # last close checkpoints the WAL), and a read then waits instead of failing 'locked'.
            conn.set_busy_timeout(busy_timeout_ms)
            conn.execute("select count(*) from sqlite_schema")  # fails now on a non-database
        except (apsw.CantOpenError, apsw.ReadOnlyError):
            if not (readonly and _immutable_ok(path)):
                raise
            if conn is not None:
                conn.close()
            # A WAL database on a read-only file system, or in a folder this user cannot write:
            # SQLite cannot make its -shm file there. With no -wal file to read, the database
            # file is all there is, and it is read as immutable.
            import urllib.parse

            uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?immutable=1"
            conn = apsw.Connection(uri, flags=flags | apsw.SQLITE_OPEN_URI)
        conn.set_busy_timeout(busy_timeout_ms)
        if not memory and not readonly:
            conn.execute("pragma journal_mode = wal")
            conn.set_wal_hook(_checkpointer(os.path.abspath(path)))
        conn.execute("pragma synchronous = normal; pragma foreign_keys = on")
        conn.execute(f"pragma cache_size = -{CACHE_KIB}")
    except apsw.Error as e:
        if conn is not None:
            close(conn, damaged=isinstance(e, DAMAGED))
        problem = file_error(e, path, writing=not readonly)
        if problem is None:
            raise
        raise problem from e
    load(conn, backend)
    return conn


# The errors that say a database file is damaged: nothing more is written to it.
DAMAGED = (apsw.CorruptError, apsw.NotADBError)


def close(conn: apsw.Connection, damaged: bool = False) -> None:
    """Closes ``conn``; on a ``damaged`` database without the checkpoint SQLite makes when the
    last connection closes: the -wal file stays as it is (``sqlite3 .recover`` reads it)
    instead of being copied into the damaged file. Nor on a replicated one (``replicated``)."""
    if damaged or (conn.filename and replicated(conn.filename)):
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    conn.close()


class transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on error: the write lock is taken up front, so
    two writers wait on the busy timeout instead of failing with a deadlock."""

    def __init__(self, conn: apsw.Connection):
        self.conn = conn

    def __enter__(self):
        self.conn.execute("begin immediate")
        return self.conn

    def __exit__(self, exc_type, exc, tb):
        self.conn.execute("commit" if exc_type is None else "rollback")
        return False


# SQLite's own automatic checkpoint: once a commit leaves this many pages in the -wal file.
CHECKPOINT_PAGES = 1000


def replicated(path: str) -> bool:
    """Whether Litestream replicates the database ``path``: it keeps its state in the folder
    ``.NAME-litestream`` beside the file (from its first start on, whether it runs now or not).

    Then only Litestream checkpoints the file. A checkpoint by another process while Litestream
    is down or starting moves pages of the -wal file it has not copied into the database file
    and lets the next writer start the -wal file over; Litestream 0.5 then snapshots the file
    while writers keep changing it, and that snapshot can be torn (a replica that restores
    damaged: docs/reliability.md, Replication). Left to Litestream, the -wal file is the one it
    follows when it starts again, and grows meanwhile.
    """
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.isdir(os.path.join(folder, f".{name}-litestream"))


def _checkpointer(path: str):
    """A WAL hook in place of SQLite's automatic checkpoint (which it replaces): the same
    PASSIVE checkpoint at CHECKPOINT_PAGES, unless the file is ``replicated``, asked at each
    such commit, so a connection opened before replication began stops checkpointing too."""

    def hook(conn: apsw.Connection, schema: str, pages: int) -> int:
        if pages >= CHECKPOINT_PAGES and not replicated(path):
            # As SQLite's own hook, which ignores the checkpoint's result: the transaction is
            # committed already, and an error here would make it look failed. Busy (another
            # connection), locked (a statement of this one still reading): the next commit
            # tries again.
            with contextlib.suppress(apsw.Error):
                conn.wal_checkpoint(schema)
        return apsw.SQLITE_OK

    return hook


def _read_only_fs(path: str) -> bool:
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def writable(path: str) -> bool:
    """Whether this user can write the database ``path`` and make its -wal and -shm files."""
    folder = os.path.dirname(os.path.abspath(path))
    return os.access(path, os.W_OK) and os.access(folder, os.W_OK)


def _immutable_ok(path: str) -> bool:
    """Whether ``path`` is a file in a folder where no -shm file can be made (a read-only file
    system, or a folder this user cannot write) with no transactions left in a -wal file
    (reading it as immutable would miss those)."""
    wal = path + "-wal"
    folder = os.path.dirname(os.path.abspath(path))
    return (
        os.path.isfile(path)
        and (_read_only_fs(path) or not os.access(folder, os.W_OK))
        and not (os.path.exists(wal) and os.path.getsize(wal) > 0)
    )


def file_error(error: apsw.Error, path: str, writing: bool = True) -> DatabaseError | None:
    """The one-line DatabaseError for an SQLite error that is about the file ``path`` itself
    (cannot be opened, not a database, damaged, read-only, full, locked): what is wrong and what
    to do. None for any other error."""
    if isinstance(error, apsw.NotADBError):
        why = f"{path} is not a SQLite database (or its header is damaged)"
        return DatabaseError(f"{why}; check the path, or restore the file from a backup")
    if isinstance(error, apsw.CorruptError):
        return DatabaseError(
            f"{path} is damaged ({error}); restore it from a backup or recover it with "
            f"`sqlite3 {path} .recover`"
        )
    if isinstance(error, apsw.FullError):
        return DatabaseError(f"cannot write {path}: the disk is full; free some space and retry")
    if isinstance(error, (apsw.BusyError, apsw.LockedError)):
        return DatabaseError(f"{path} is locked by another process; try again when it is done")
    if isinstance(error, (apsw.CantOpenError, apsw.ReadOnlyError, apsw.IOError)):
        return DatabaseError(_file_problem(path, writing, error))
    import re  # here, not at import: the first connect of a process stays light

    newer = re.search(
        r"made by a newer hybridsql \(storage format (\d+); this one reads (\d+)\)", str(error)
    )
    if newer:
        return DatabaseError(
            f"{path} was made by a newer hybridsql (its vectors' storage format {newer[1]}, this"
            f" one reads {newer[2]}); upgrade hybridsql to use it"
        )
    dims = re.search(r"vector.* has (\d+) dimensions, the .*vectors .* have (\d+)$", str(error))
    if dims:
        return DatabaseError(
            f"{path} holds vectors of {dims[2]} dimensions where its model gives {dims[1]}: the"
            " model changed under the same name, or the file is damaged; index into a new"
            " file, or restore it from a backup"
        )
    return None


def _file_problem(path: str, writing: bool, error: apsw.Error) -> str:
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"cannot open {path}: it is a folder; name a database file in it"
    if not os.path.isdir(folder):
        return f"cannot open {path}: the folder {folder} does not exist"
    if writing and _read_only_fs(path):
        return f"cannot write {path}: its file system is read-only; copy it somewhere writable"
    if not os.path.exists(path):
        return f"{path} does not exist; create an index with `hybridsql index DIR --db {path}`"
    if not os.access(path, os.R_OK):
        return f"cannot read {path}: this user may not read it; check permissions"
    wal = path + "-wal"
    shm = path + "-shm"
    if (
        not writing
        and os.path.exists(wal)
        and os.path.getsize(wal) > 0
        and not os.path.exists(shm)
        and not os.access(folder, os.W_OK)
    ):
        return (
            f"cannot read {path}: its -wal file holds transactions, which SQLite reads through a"
            f" -shm file that this user cannot make in {folder}; copy both files somewhere"
            " writable, or open it once as a user who can write there"
        )
    if writing and not (os.access(path, os.W_OK) and os.access(folder, os.W_OK)):
        return f"cannot write {path}: the file or its folder is read-only; check permissions"
    return f"cannot open {path}: {error}"


def backend_of(conn: apsw.Connection | sqlite3.Connection) -> str:
    """Which backend answers the hybridsql functions on ``conn``."""
    cursor = conn.cursor() if isinstance(conn, apsw.Connection) else conn
    (row,) = cursor.execute("select hybridsql_debug()").fetchall()
    return str(row[0]).split("; backend ")[1].split(";")[0]
