"""Embeddings: the Embedder (a provider behind its cache) and SQL embed() registered from Python.

A provider has ``model_id``, ``dims`` and ``embed(texts) -> float32 array (n, dims)``: the local
model (local_model.py), an OpenAI-compatible HTTP server or an ``llm`` model (providers.py).
:class:`Embedder` puts a two-level cache in front of one: an in-memory LRU and the SQLite table
``embedding_cache``, both keyed by (model_id and revision, sha256 of the text), and, in a
hybridsql index, the index's own vectors (the cache keeps only those the index lacks: see
schema.py). Vectors travel as float32 little-endian BLOBs. The windows a long text is read in
are windows.py's, the threads a batch runs on threads.py's.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import apsw

# `X as X`: names of the modules split from this one, still importable from it.
from hybridsql.db.extension import cache_dir as cache_dir
from hybridsql.embedding.local_model import LocalProvider, _local_available
from hybridsql.embedding.providers import (
    EmbeddingProvider,
    LLMProvider,
    OpenAIProvider,
    resolve_provider,
)
from hybridsql.embedding.threads import _STOP, _Interrupted
from hybridsql.embedding.windows import READABLE as READABLE
from hybridsql.embedding.windows import encode_windows as encode_windows
from hybridsql.embedding.windows import readable_share as readable_share
from hybridsql.errors import EmbeddingError

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "Embedder",
    "EmbeddingProvider",
    "LLMProvider",
    "LocalProvider",
    "OpenAIProvider",
    "register_embed",
    "resolve_provider",
]

_SQL_TYPES = {int: "integer", float: "real", bytes: "blob"}
# How long an Embedder looks for a vector it cached in the index: a file's chunks are written
# once all have vectors, and a large file's (thousands of chunks) are embedded over many calls.
# A text is looked for 1, 2, 4, ... calls after it was cached, up to _CHECKS calls after: a few
# looks each, while a query's vector, which never reaches the index, is let go.
_CHECKS = 4096


class Embedder:
    """A provider behind a cache, so an unchanged text is never embedded twice.

    ``conn`` is an apsw.Connection holding the table ``embedding_cache`` (created if missing),
    shared across processes; None keeps the cache in memory only. ``lru_size`` bounds the
    in-memory cache. Where ``conn`` holds a hybridsql index whose vectors this provider made, a
    text's vector is also looked up there, and the cache's rows that the index holds are deleted:
    at each call those added since the last one (by any process), in later calls those it
    stored or read, and when it is closed.
    """

    def __init__(
        self, provider: EmbeddingProvider, conn: apsw.Connection | None = None, lru_size: int = 4096
    ):
        if conn is not None and not isinstance(conn, apsw.Connection):
            raise TypeError(
                f"Embedder(): conn must be an apsw.Connection or None, not {type(conn).__name__}"
            )
        self.provider = provider
        self.conn = conn
        self.lru_size = lru_size
        self._lru: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        # Texts whose vector is in embedding_cache and may since have reached the index: key ->
        # [text, the call it was cached or read at].
        self._pending: dict[bytes, list] = {}
        self._calls = 0  # calls to embed() so far
        self._index = False  # whether the index's vectors serve as the cache
        if conn is not None:
            from hybridsql.db.schema import ensure_cache

            self._index = ensure_cache(conn, self.model_id, self.cache_id)

    @property
    def model_id(self) -> str:
        """The provider's model id, which tags its vectors."""
        return self.provider.model_id

    @property
    def cache_id(self) -> str:
        """The first half of every cache key: the model id, and the provider's revision when it
        has one (a change in how the model is run that changes some vectors)."""
        revision = getattr(self.provider, "revision", None)
        return f"{self.model_id}@{revision}" if revision else self.model_id

    @property
    def dims(self) -> int:
        """The provider's vector width."""
        return self.provider.dims

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into a float32 array (n, dims); only cache misses reach the provider."""
        import numpy as np

        texts = texts if isinstance(texts, str) else list(texts)
        keys, found = self.lookup(texts)
        if not keys:
            return np.empty((0, self.dims), dtype=np.float32)
        missing = {k: text for k, text in zip(keys, texts, strict=True) if found[k] is None}
        if missing:
            found.update(self.store(missing, self.compute(list(missing.values()))))
        return np.stack([found[key] for key in keys])

    def lookup(self, texts: Sequence[str]) -> tuple[list, dict]:
        """(each text's cache key, {key: its cached vector, or None}): ``embed`` is lookup, then
        ``compute`` of the misses (which touches no database: it may run in another thread),
        then ``store``."""
        if isinstance(texts, str):
            raise TypeError("Embedder.embed() takes a list of texts; use embed_one() for one text")
        keys = []
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"Embedder.embed(): text {i} is {type(text).__name__}, not str")
            keys.append(hashlib.sha256(text.encode("utf-8")).digest())
        with self._lock:
            self._prune()
            return keys, {
                key: self._cached(key, text)
                for key, text in dict(zip(keys, texts, strict=True)).items()
            }

    def compute(self, texts: list[str]) -> np.ndarray:
        """The provider's vectors of ``texts``, checked, without the cache."""
        return self._embed_missing(texts)

    def store(self, missing: dict, vectors: np.ndarray) -> dict:
        """Caches ``vectors``, those of ``missing`` ({key: text}) in its order; returns them by
        key."""
        fresh = dict(zip(missing, vectors, strict=True))
        with self._lock:
            self._store(fresh, missing)
        return fresh

    def embed_one(self, text: str) -> np.ndarray:
        """Embed one text into a float32 vector of length dims."""
        return self.embed([text])[0]

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one text as a search's query: as embed_one where the provider embeds queries
        and documents alike; else (a model with a query prefix of its own, e5's "query: ") in
        its query role, kept in memory only (the index and its cache hold documents')."""
        import numpy as np

        if not getattr(self.provider, "roles", False):
            return self.embed_one(text)
        key = b"query\0" + hashlib.sha256(text.encode("utf-8")).digest()
        with self._lock:
            vector = self._lru.get(key)
        if vector is None:
            vector = np.asarray(self.provider.embed([text], role="query"), dtype=np.float32)[0]
            with self._lock:
                self._remember(key, vector)
        return vector

    def forget(self, text: str) -> None:
        """Drops ``text``'s vector from the in-memory cache (as its rows leave the table)."""
        with self._lock:
            self._lru.pop(hashlib.sha256(text.encode("utf-8")).digest(), None)

    def _cached(self, key: bytes, text: str) -> np.ndarray | None:
        import numpy as np

        from hybridsql.db.schema import INDEX_VECTOR

        vector = self._lru.get(key)
        if vector is not None:
            self._lru.move_to_end(key)
            return vector
        if self.conn is None:
            return None
        row = self.conn.execute(
            "SELECT vector FROM embedding_cache WHERE model_id = ? AND text_sha256 = ?",
            (self.cache_id, key),
        ).fetchone()
        if row is not None and self._index:
            self._pending[key] = [text, self._calls]
        elif row is None and self._index:
            row = self.conn.execute(INDEX_VECTOR, (text, self.model_id)).fetchone()
        if row is None:
            return None
        vector = np.frombuffer(row[0], dtype="<f4").astype(np.float32)
        self._remember(key, vector)
        return vector

    def _embed_missing(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        vectors = np.asarray(self.provider.embed(texts), dtype=np.float32)
        if vectors.shape != (len(texts), self.dims):
            raise EmbeddingError(
                f"{self.model_id} returned an array of shape {vectors.shape} "
                f"for {len(texts)} texts of {self.dims} dimensions"
            )
        return vectors

    def _store(self, vectors: dict[bytes, np.ndarray], texts: dict[bytes, str]) -> None:
        for key, vector in vectors.items():
            self._remember(key, vector)
            if self._index:
                self._pending[key] = [texts[key], self._calls]
        if self.conn is not None:
            insert = (
                "INSERT OR REPLACE INTO embedding_cache(model_id, text_sha256, vector,"
                " text_length, text_tail) VALUES (?1, ?2, ?3, length(?4), substr(?4, -24))"
            )
            rows = [
                (self.cache_id, key, v.astype("<f4").tobytes(), texts[key])
                for key, v in vectors.items()
            ]
            if len(rows) == 1:
                # One statement is atomic alone; SQLite refuses a savepoint inside a running
                # write, which is where SQL embed() is called from in an INSERT.
                self.conn.execute(insert, rows[0])
            else:
                with self.conn:
                    self.conn.executemany(insert, rows)

    def close(self) -> None:
        """Deletes the cache rows this Embedder stored or read whose vectors the index now holds
        (HybridIndex.close calls it); a row it leaves (a process killed) serves as the cache."""
        with self._lock:
            if self.conn is not None:
                # A full disk, a busy file: the rows stay, as a cache.
                with contextlib.suppress(apsw.Error):
                    self._prune(every=True)

    def _prune(self, every: bool = False) -> None:
        """Deletes the cache rows of pending texts whose vector the index now holds: each text
        ``every`` time, else 1, 2, 4... calls after it was cached; one cached _CHECKS calls ago
        is let go (a query's vector never reaches the index).

        Housekeeping: what is due is found by reading, so that a call with nothing to delete (a
        search's) takes no write lock, and a busy file leaves the rows as a cache, checked
        again at a later call, instead of failing the caller's write or search."""
        from hybridsql.db.extension import transaction
        from hybridsql.db.schema import CACHED_IN_INDEX, prune_cache, unpruned_cache

        self._calls += 1
        due = []
        for key, (text, born) in list(self._pending.items()):
            age = self._calls - born
            check = every or not age & (age - 1)  # a power of two
            if (
                check
                and self.conn.execute(
                    f"select 1 {CACHED_IN_INDEX}", (text, self.model_id, self.cache_id, key)
                ).fetchone()
            ):
                due.append((key, text))
            elif age >= _CHECKS:
                del self._pending[key]
        # Rows added since the last prune: what earlier runs left, vectors of deleted chunks
        # whose texts were written again. At a call, not when made: an open that fails on a
        # damaged file must write nothing to it.
        added = self._index and unpruned_cache(self.conn) is not None
        if not due and not added:
            return
        try:
            with contextlib.nullcontext() if self.conn.in_transaction else transaction(self.conn):
                if added:
                    prune_cache(self.conn, self.model_id, self.cache_id)
                for key, text in due:
                    self.conn.execute(
                        f"delete {CACHED_IN_INDEX}", (text, self.model_id, self.cache_id, key)
                    )
        except apsw.BusyError:
            return  # the rows stay, as a cache; checked again at a later call
        for key, _ in due:
            del self._pending[key]

    def _remember(self, key: bytes, vector: np.ndarray) -> None:
        self._lru[key] = vector
        self._lru.move_to_end(key)
        while len(self._lru) > self.lru_size:
            self._lru.popitem(last=False)


def register_embed(conn, embedder, interrupted: Callable[[], bool] | None = None) -> None:
    """Register ``embed(text)`` and ``embed(text, role)`` -> float32 BLOB (NULL for NULL) on an
    apsw or sqlite3 connection: a query's vector, or with role 'document' a document's, as the
    extension's embed() (csrc/model/embedsql.c, Requirement 12).

    ``embedder`` is an Embedder, or a function that makes one when ``embed`` is first called.
    Nothing is embedded or loaded until then.

    ``interrupted`` tells whether the statement running embed() has been interrupted
    (``interrupt()`` on the connection); an apsw connection's own ``is_interrupted`` where not
    given. The local model checks it before each window of the text: an interrupted call returns
    at once, caching nothing, and SQLite ends the statement with its interrupt error. So a time
    limit that interrupts the connection (Datasette's, as the Datasette plugin sets it up) waits
    for one window, not for the whole text.
    """
    made = embedder if isinstance(embedder, Embedder) else None
    if interrupted is None and isinstance(conn, apsw.Connection):

        def interrupted() -> bool:
            return conn.is_interrupted

    def embed(text, role="query"):
        nonlocal made
        if text is None:
            return None
        if not isinstance(text, str):
            kind = _SQL_TYPES.get(type(text), type(text).__name__)
            raise TypeError(f"embed(): 1st argument must be text, got {kind}")
        if role not in ("query", "document"):
            got = f"'{role}'" if isinstance(role, str) else _SQL_TYPES.get(type(role), "NULL")
            raise ValueError(f"embed(): 2nd argument must be 'query' or 'document', got {got}")
        if interrupted is not None and interrupted():
            return None  # never seen: SQLite fails the statement as interrupted
        if made is None:
            made = embedder()
        stopping = _STOP.set(interrupted)
        try:
            vector = made.embed_query(text) if role == "query" else made.embed_one(text)
        except _Interrupted:
            return None
        finally:
            _STOP.reset(stopping)
        return vector.astype("<f4").tobytes()

    if isinstance(conn, apsw.Connection):
        conn.create_scalar_function("embed", embed, 1)
        conn.create_scalar_function("embed", embed, 2)
    else:
        conn.create_function("embed", 1, embed)
        conn.create_function("embed", 2, embed)


def default_embedder() -> Embedder:
    """An Embedder on the provider of ``$HYBRIDSQL_EMBEDDER`` (default auto: the local model).
    Where there is none, SQL embed() fails with one line; it does not say, as a search does,
    that it runs keyword-only."""
    import os

    auto = (os.environ.get("HYBRIDSQL_EMBEDDER") or "auto").strip().lower() == "auto"
    provider = None if auto and not _local_available() else resolve_provider(None)
    if provider is None:
        raise EmbeddingError(
            "embed(): no embedding provider: pip install 'hybridsql[local]'"
            " or set HYBRIDSQL_EMBEDDER"
        )
    return Embedder(provider)
