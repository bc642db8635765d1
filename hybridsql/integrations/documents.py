"""A collection of documents with ids and metadata in a hybridsql index: what the LangChain and
LlamaIndex stores (langchain.py, llamaindex.py beside this module) are made of.

A document is a file of the index under the root ``collection:NAME``, its path the document's
id, with one chunk (the text as given: the framework's splitter has cut it already) and its
metadata as JSON in ``document_metadata``. So what a store writes is an ordinary index: the
CLI, the MCP server, Datasette and the stock shell search it like any folder's notes.

A search is the one statement of hybridsql.search with a Profile whose filter is the metadata
condition, applied before the top k on both sides; a similarity search is a k-nearest query on
``vectors`` with the same condition. Filters are trees of ``Cond`` and ``Logic`` that each
framework builds from its own conventions; ``filter_sql`` writes them as SQL with every value a
parameter.
"""

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hybridsql.errors import QueryError
from hybridsql.locking import one_call_at_a_time
from hybridsql.search.options import SearchOptions
from hybridsql.search.statement import Profile

METADATA_TABLE = """
create table if not exists document_metadata(
  file_id integer primary key,  -- files(id): a document of a collection
  metadata text not null        -- JSON object
);
create trigger if not exists document_metadata_delete after delete on files begin
  delete from document_metadata where file_id = old.id;
end;
"""
ROOT = "collection:"
# json.dumps(m, ensure_ascii=False, default=str), its encoder made once, not once a document
_METADATA_JSON = json.JSONEncoder(ensure_ascii=False, default=str).encode
OPS = ("=", "!=", ">", ">=", "<", "<=", "in", "nin", "like", "exists", "contains", "text", "empty")
_COMPARE = {"=": "=", "!=": "!=", ">": ">", ">=": ">=", "<": "<", "<=": "<="}


@dataclass
class Cond:
    """``key op value`` on a metadata field: a comparison (=, !=, >, >=, <, <=), ``in`` or
    ``nin`` (a list), ``like`` (SQL LIKE, case-insensitive), ``text`` (holds value, case
    kept), ``exists`` (a bool), ``contains`` (the field is a list holding value), ``empty``
    (a bool: the field is missing, null or an empty list)."""

    key: str
    op: str
    value: Any


@dataclass
class Logic:
    """``and``, ``or`` or ``not`` (one part) of conditions."""

    op: str
    parts: list = field(default_factory=list)


@dataclass
class Found:
    """A document a search found: its id, text, metadata, score and vector cosine."""

    id: str
    text: str
    metadata: dict
    score: float
    cosine: float | None = None


def _value(v: Any, key: str) -> Any:
    if isinstance(v, bool):
        return int(v)  # json_extract gives 1 and 0 for true and false
    if v is None or isinstance(v, (int, float, str)):
        return v
    raise QueryError(f"filter on {key!r}: a value must be text, a number, a bool or None")


ID = "#id"  # the key of a condition on the documents' ids, not on a metadata field


def filter_sql(tree: Cond | Logic | None, params: dict, files: str = "f") -> str:
    """The SQL condition of a filter tree on ``document_metadata m`` and the documents' files
    row (alias ``files``); its values go into ``params`` (as :f0, :f1, ...)."""
    if tree is None:
        return "1"

    def bind(value: Any) -> str:
        name = f"f{len(params)}"
        params[name] = value
        return f":{name}"

    def name(key: str) -> str:
        # The field is found by its name among the object's keys (json_each), not by a JSON
        # path, which cannot spell every name (a double quote in it).
        if not isinstance(key, str) or not key:
            raise QueryError(f"a filter's field must be a non-empty name, not {key!r}")
        return bind(key)

    def walk(node) -> str:
        if isinstance(node, Logic):
            if node.op == "not":
                return f"not ({walk(node.parts[0])})"
            if node.op not in ("and", "or"):
                raise QueryError(f"a filter joins conditions with and, or, not: not {node.op!r}")
            if not node.parts:
                return "1" if node.op == "and" else "0"
            return "(" + f" {node.op} ".join(walk(p) for p in node.parts) + ")"
        if node.op not in OPS:
            raise QueryError(f"filter on {node.key!r}: unknown operator {node.op!r}")
        if node.key == ID:
            if node.op not in ("=", "!=", "in", "nin"):
                raise QueryError(f"ids are compared with =, !=, in or nin, not {node.op}")
            at, f = "", f"{files}.path"
        else:
            at = name(node.key)
            f = f"(select value from json_each(m.metadata) where key = {at})"
        if node.op == "exists":
            found = f"exists (select 1 from json_each(m.metadata) where key = {at})"
            return found if node.value else f"not {found}"
        if node.op in ("in", "nin"):
            if isinstance(node.value, (str, bytes)) or not isinstance(node.value, Sequence):
                raise QueryError(f"filter on {node.key!r}: {node.op} takes a list of values")
            values = ", ".join(bind(_value(v, node.key)) for v in node.value)
            inside = f"{f} in ({values})" if values else "0"
            return inside if node.op == "in" else f"({f} is not null and not ({inside}))"
        if node.op == "contains":
            return (
                "exists (select 1 from json_each(m.metadata) o, json_each(o.value) e"
                f" where o.key = {at} and o.type = 'array'"
                f" and e.value = {bind(_value(node.value, node.key))})"
            )
        if node.op == "text":
            return f"instr({f}, {bind(_value(node.value, node.key))}) > 0"
        if node.op == "empty":
            full = (
                f"exists (select 1 from json_each(m.metadata) where key = {at}"
                " and type != 'null' and not (type = 'array' and json_array_length(value) = 0))"
            )
            return f"not {full}" if node.value else full
        if node.op == "like":
            return f"{f} like {bind(_value(node.value, node.key))}"
        value = _value(node.value, node.key)
        if value is None:
            return f"{f} is null" if node.op == "=" else f"{f} is not null"
        return f"{f} {_COMPARE[node.op]} {bind(value)}"

    return walk(tree)


# new_ids' last id: its millisecond and its counter, which the next id of the same millisecond
# (or of an earlier one: a clock set back) goes on from.
_LAST_ID = [0, 0]
_IDS_LOCK = threading.Lock()


def new_ids(n: int) -> list[str]:
    """``n`` new ids, UUIDs of version 7 (RFC 9562) written as ``str(uuid.UUID)`` writes them:
    the millisecond they were made, then a 42-bit counter that starts at random in each
    millisecond (its top bit clear) and goes up by one an id, then 32 random bits. Ids made
    later sort after those made before, as text too, by this process at least: each goes in at
    the end of the ``files`` index on (root, path) rather than at a random place of it (a
    version 4 id dirtied most of that index's leaf pages in every batch, each written to the
    -wal file and again to the database). Made from one read of the random source."""
    import numpy as np

    if n <= 0:
        return []
    rand = np.frombuffer(os.urandom(8 + 4 * n), dtype=np.uint32)
    with _IDS_LOCK:
        ms, counter = time.time_ns() // 1_000_000, 0
        if ms <= _LAST_ID[0]:
            ms, counter = _LAST_ID[0], _LAST_ID[1] + 1
        else:
            counter = (int(rand[0]) << 9 | int(rand[1]) >> 23) & (1 << 41) - 1
        if counter + n > 1 << 42:  # the millisecond's counter is spent: the next one's
            ms, counter = ms + 1, 0
        _LAST_ID[:] = [ms, counter + n - 1]
    counters = np.arange(counter, counter + n, dtype=np.uint64)
    high = np.uint64(ms << 16 | 0x7000) | counters >> np.uint64(30)
    low = (
        np.uint64(0x8000000000000000)
        | (counters & np.uint64((1 << 30) - 1)) << np.uint64(32)
        | rand[2:].astype(np.uint64)
    )
    h = np.stack([high, low], axis=1).astype(">u8").tobytes().hex()
    return [
        f"{h[j : j + 8]}-{h[j + 8 : j + 12]}-{h[j + 12 : j + 16]}-"
        f"{h[j + 16 : j + 20]}-{h[j + 20 : j + 32]}"
        for j in range(0, 32 * n, 32)
    ]


_PACKERS: dict = {}  # struct.Struct("<Nf") by N


def _float32(row: Sequence) -> bytes:
    """A list of floats as little-endian float32 bytes, each value rounded as a C cast rounds it.

    struct packs a list three times faster than array('f') reads one; a value that struct
    refuses (beyond float32's range, or not a number) goes through array as it always did, so
    that the store answers it as before (vector_index refuses the infinity, array the text)."""
    import struct
    from array import array

    n = len(row)
    packer = _PACKERS.get(n) or _PACKERS.setdefault(n, struct.Struct(f"<{n}f"))
    try:
        return packer.pack(*row)
    except (OverflowError, struct.error):
        return array("f", row).tobytes()  # native order: little-endian on every host we run on


@one_call_at_a_time
class Collection:
    """The documents of one collection in an open HybridIndex.

    ``embed_documents(texts)`` and ``embed_query(text)`` give vectors (sequences of floats) of
    the model ``model_id``; None for both makes a keyword-only collection. ``record(dims)``,
    where given, is called in each transaction that writes vectors (the index records the model
    that made them: HybridIndex.record_model). Threads may share it (LangChain's async methods
    run it in others): its methods run one at a time, under the index's lock."""

    def __init__(
        self,
        index,
        name: str = "default",
        embed_documents: Callable[[list], Sequence] | None = None,
        embed_query: Callable[[str], Sequence] | None = None,
        model_id: str | None = None,
        record: Callable[[int], None] | None = None,
    ) -> None:
        from hybridsql.db.extension import transaction
        from hybridsql.indexing.index import insert_rows

        if not isinstance(name, str) or not name:
            raise QueryError(f"a collection's name must be non-empty text, not {name!r}")
        self.index = index
        self.lock = index.lock
        self.conn = index.conn
        self.root = ROOT + name
        self.embed_documents = embed_documents
        self.embed_query = embed_query
        self.model_id = model_id
        self.record = record
        self._transaction = transaction
        self._insert_rows = insert_rows
        if not index.readonly:
            with transaction(self.conn):
                self.conn.execute(METADATA_TABLE)

    # ---- writing ----

    def add(
        self,
        texts: Sequence[str],
        metadatas: Sequence[dict],
        ids: Sequence[str],
        vectors: Sequence | None = None,
    ) -> list:
        """Adds (or replaces, by id) documents; returns their ids. ``vectors``: theirs, made
        by the caller, else by embed_documents."""
        texts, metadatas, ids = list(texts), list(metadatas), [str(i) for i in ids]
        if not len(texts) == len(metadatas) == len(ids):
            raise QueryError("texts, metadatas and ids must be as many")
        for t in texts:
            if not isinstance(t, str):
                raise QueryError(f"a document's text must be text, not {type(t).__name__}")
        if len(set(ids)) != len(ids):
            raise QueryError("the ids of one call must differ")
        blobs = [_METADATA_JSON(m or {}) for m in metadatas]
        vectors = self._vectors(texts, vectors)
        import hashlib

        now = time.time()
        sizes = [len(t.encode("utf-8", "surrogatepass")) for t in texts]
        sums = [hashlib.sha256(t.encode("utf-8", "surrogatepass")).hexdigest() for t in texts]
        conn = self.conn
        with self._transaction(conn):
            # Many ids to a statement, as insert_rows does: the deletes fire FTS5's triggers.
            for start in range(0, len(ids), 500):
                part = ids[start : start + 500]
                conn.execute(
                    "delete from files where root = ? and path in ("
                    + ", ".join(["?"] * len(part))
                    + ")",
                    [self.root, *part],
                )
            # Ids given here, under the write lock, so that each table's rows go in at once.
            file0 = conn.execute("select coalesce(max(id), 0) + 1 from files").fetchone()[0]
            chunk0 = conn.execute("select coalesce(max(id), 0) + 1 from chunks").fetchone()[0]
            insert = self._insert_rows
            insert(
                conn,
                "files",
                [(file0 + n, self.root, i, sums[n], sizes[n], now) for n, i in enumerate(ids)],
            )
            insert(conn, "document_metadata", [(file0 + n, m) for n, m in enumerate(blobs)])
            insert(
                conn,
                "chunks",
                [
                    (chunk0 + n, "document", file0 + n, ids[n], 1, t.count("\n") + 1, "", t, now)
                    for n, t in enumerate(texts)
                ],
            )
            if vectors is not None:
                model = self.model_id
                if self.record is not None and vectors:
                    self.record(len(vectors[0]) // 4)
                insert(
                    conn,
                    "vectors",
                    [(chunk0 + n, v, model, "document") for n, v in enumerate(vectors)],
                )
        return ids

    def _vectors(self, texts: list, given: Sequence | None) -> list | None:
        """Each text's vector as float32 bytes: those given, else embed_documents'."""
        if given is None and (self.embed_documents is None or not texts):
            return None
        made = given if given is not None else self.embed_documents(texts)  # type: ignore[misc]
        rows = list(made)
        if len(rows) != len(texts):
            raise QueryError(f"the embeddings gave {len(rows)} vectors for {len(texts)} texts")
        return [r.astype("<f4").tobytes() if hasattr(r, "astype") else _float32(r) for r in rows]

    def delete(self, ids: Sequence[str] | None = None, where: Cond | Logic | None = None) -> int:
        """Deletes the documents with these ids (missing ones are no error), or those the filter
        ``where`` selects; returns how many went."""
        with self._transaction(self.conn):
            if ids is not None:
                gone = 0
                for doc_id in ids:
                    self.conn.execute(
                        "delete from files where root = ? and path = ?", (self.root, str(doc_id))
                    )
                    gone += self.conn.changes()
                return gone
            params: dict = {"root": self.root}
            cond = filter_sql(where, params)
            self.conn.execute(
                "delete from files where id in (select f.id from files f join document_metadata m"
                f" on m.file_id = f.id where f.root = :root and {cond})",
                params,
            )
            return self.conn.changes()

    def clear(self) -> None:
        """Deletes every document of the collection."""
        with self._transaction(self.conn):
            self.conn.execute("delete from files where root = ?", (self.root,))

    # ---- reading ----

    def get(self, ids: Sequence[str]) -> list:
        """The documents with these ids that exist, as (id, text, metadata), in the order
        given."""
        found = []
        for doc_id in ids:
            row = self.conn.execute(
                "select c.text, m.metadata from files f join chunks c on c.file_id = f.id"
                " join document_metadata m on m.file_id = f.id where f.root = ? and f.path = ?",
                (self.root, str(doc_id)),
            ).fetchone()
            if row is not None:
                found.append((str(doc_id), row[0], json.loads(row[1])))
        return found

    def ids(self, where: Cond | Logic | None = None) -> list:
        """The ids of the documents the filter selects (all of them without one), in the order
        they were added."""
        params: dict = {"root": self.root}
        cond = filter_sql(where, params)
        return [
            r[0]
            for r in self.conn.execute(
                "select f.path from files f join document_metadata m on m.file_id = f.id"
                f" where f.root = :root and {cond} order by f.id",
                params,
            )
        ]

    def count(self) -> int:
        return self.conn.execute(
            "select count(*) from files where root = ?", (self.root,)
        ).fetchone()[0]

    def alone(self) -> bool:
        """Whether the index holds no document but this collection's: then a search without a
        filter needs no condition (a list of every id costs a k-nearest query ten times its
        time at 10k documents)."""
        return bool(
            self.conn.execute(
                "select (select count(*) from files) = (select count(*) from files"
                " where root = ?) and not exists (select 1 from chunks where file_id is null"
                " and kind = 'document')",
                (self.root,),
            ).fetchone()[0]
        )

    def most(self) -> bool:
        """Whether the collection holds at least a quarter of the index's documents: then
        vector_index hands its rows best first for SQLite to test that they are the
        collection's (order by score desc limit), where the list of its every row would cost a
        pass over them all (docs/benchmarks.md). What a metadata filter keeps is unknown: it is
        listed."""
        return bool(
            self.conn.execute(
                "select 4 * (select count(*) from files where root = ?) >="
                " (select count(*) from files)",
                (self.root,),
            ).fetchone()[0]
        )

    def profile(self, where: Cond | Logic | None) -> Profile:
        """The search statement's Profile for this collection and filter: its documents only,
        the filter applied before each side's top k, and each one's id and metadata."""
        params: dict = {"collection_root": self.root}
        filters = ""
        if where is not None or not self.alone():
            cond = filter_sql(where, params, "cf")
            filters = f"cf.root = :collection_root and {cond}"
        return Profile(
            kind="document",
            join="join files cf on cf.id = c.file_id"
            " join document_metadata m on m.file_id = c.file_id",
            filters=filters,
            filters_keep_most=bool(filters) and where is None and self.most(),
            columns={"doc_id": "cf.path", "metadata": "m.metadata"},
            params=params if filters else {},
        )

    def search(
        self,
        query: str,
        k: int = 4,
        mode: str = "hybrid",
        where: Cond | Logic | None = None,
        query_vector: Sequence[float] | None = None,
        **options: Any,
    ) -> list:
        """The k best documents for ``query`` by the one hybrid statement (``mode`` hybrid,
        semantic or keyword, and any other SearchOptions), as Found. ``query_vector``: the
        query's, made by the caller, else by embed_query."""
        if self.embed_query is None and query_vector is None and mode != "keyword":
            mode = "keyword"
        opts = SearchOptions(
            mode=mode,
            limit=k,
            candidate_pool=max(options.pop("fetch_k", 0), 100, k),
            min_score=options.pop("min_score", 0.0),
            vector_floor=options.pop("vector_floor", 0.0),
            decay=False,
            per_file=0,
            **options,
        )
        from hybridsql.search.searcher import Searcher

        embedder = _QueryEmbedder(self.model_id, self.embed_query, query_vector)
        searcher = Searcher(self.conn, embedder, self.index.searcher.native)
        results = searcher.search(query, opts, self.profile(where))
        return [
            Found(
                r.extra["doc_id"],
                r.text,
                json.loads(r.extra["metadata"]),
                r.score,
                r.vector_score,
            )
            for r in results.results
        ]

    def nearest(self, vector: Sequence[float], k: int = 4, where=None) -> list:
        """The k documents whose vectors are most like ``vector`` (cosine), best first, as
        Found (score the cosine): exact, whatever their scores, the filter applied first."""
        import numpy as np

        if self.model_id is None:
            return []
        blob = np.asarray(vector, dtype="<f4").tobytes()
        params: dict = {"root": self.root}
        cond = filter_sql(where, params)
        ids_sql = (
            "select f.id from files f join document_metadata m on m.file_id = f.id"
            f" where f.root = :root and {cond}"
        )
        searcher = self.index.searcher
        if searcher.native:
            some = where is not None or not self.alone()
            nearest = "select v.chunk_id, v.score from vectors v where v.vector match :q"
            kind = " and v.model_id = :model and v.kind = 'document'"
            if some and where is None and self.most():  # tested on the rows handed best first
                sql = (
                    f"{nearest}{kind} and exists (select 1 from chunks c join files f on"
                    " f.id = c.file_id where c.id = v.chunk_id and f.root = :root)"
                    " order by v.score desc limit :k"
                )
            elif some:  # the list of the ids it keeps, handed to vector_index
                sql = (
                    f"{nearest} and v.k = :k{kind} and v.chunk_id in"
                    f" (select c.id from chunks c where c.file_id in ({ids_sql}))"
                )
            else:
                sql = f"{nearest} and v.k = :k{kind}"
            rows = self.conn.execute(
                sql,
                {**params, "q": blob, "k": k, "model": self.model_id}
                if some
                else {"q": blob, "k": k, "model": self.model_id},
            ).fetchall()
        else:
            allowed = [
                r[0]
                for r in self.conn.execute(
                    f"select c.id from chunks c where c.file_id in ({ids_sql})", params
                )
            ]
            reader = searcher._reader("numpy")
            where_ = {"model_id": self.model_id, "kind": "document"}
            rows = reader.topk(blob, k, where_, allowed)
        found = []
        for chunk_id, score in rows:
            doc_id, text, meta = self.conn.execute(
                "select c.path, c.text, m.metadata from chunks c join document_metadata m"
                " on m.file_id = c.file_id where c.id = ?",
                (chunk_id,),
            ).fetchone()
            found.append(Found(doc_id, text, json.loads(meta), score, score))
        return found

    def vectors(self, ids: Sequence[str]) -> dict:
        """The stored vectors of these documents, by id (numpy arrays)."""
        import numpy as np

        out = {}
        for doc_id in ids:
            row = self.conn.execute(
                "select v.vector from files f join chunks c on c.file_id = f.id"
                " join vectors v on v.chunk_id = c.id where f.root = ? and f.path = ?"
                " and v.model_id = ?",
                (self.root, str(doc_id), self.model_id),
            ).fetchone()
            if row is not None:
                out[str(doc_id)] = np.frombuffer(row[0], dtype="<f4")
        return out


class _QueryEmbedder:
    """What Searcher asks of an embedder, from a collection's embed_query (no provider of
    hybridsql's own, so the query is embedded by embed_query, never by SQL embed())."""

    provider = None

    def __init__(self, model_id, embed_query, vector) -> None:
        self.model_id, self._embed_query, self.vector = model_id, embed_query, vector

    def embed_one(self, text: str):
        import numpy as np

        vector = self.vector if self.vector is not None else self._embed_query(text)
        return np.asarray(vector, dtype="<f4")

    def embed_query(self, text: str):
        """A search's query, as Embedder.embed_query: the collection's own embed_query."""
        return self.embed_one(text)
