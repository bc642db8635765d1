"""The searcher: runs one search on a connection, from the query to SearchResults.

It checks the options, embeds the query, makes the keyword plan, finds vector candidates in
Python where the extension cannot, runs the statement, reads its rows by column name, and
re-ranks for diversity (MMR) when asked.
"""

import json
import re
import threading
import time
from array import array
from collections import OrderedDict
from dataclasses import replace
from typing import TYPE_CHECKING

from hybridsql.db.schema import FTS_TABLES, SCHEMA_VERSION, has_fts, schema_version
from hybridsql.embedding.engine import engine_connection, sql_embed, thread_engine_connection
from hybridsql.errors import QueryError
from hybridsql.files.discovery import is_markdown
from hybridsql.search.files import file_hits
from hybridsql.search.keywords import _like_pattern, clean_text, keyword_plan
from hybridsql.search.options import (
    MAX_QUERY_CHARS,
    SearchOptions,
    by_file,
    params_limit,
    unix_time,
    with_band,
)
from hybridsql.search.results import SearchResult, SearchResults
from hybridsql.search.snippets import highlight_terms, make_snippet, matched_heading
from hybridsql.search.statement import (
    RESULT_COLUMNS,
    Profile,
    build_statement,
    document_profile,
    filter_source,
    result_names,
)

if TYPE_CHECKING:  # imported on first use: numpy
    from hybridsql.db.vectors import VectorReader

RECENT_QUERIES = 16  # the query vectors a Searcher keeps


class QueryVectors:
    """Queries' vectors, by (model id, query), the last ``size`` used kept; safe to share
    between threads (a server's requests fill and read one from many)."""

    def __init__(self, size: int):
        self.size = size
        self.lock = threading.Lock()
        self.items: OrderedDict = OrderedDict()

    def get(self, key: tuple):
        with self.lock:
            found = self.items.get(key)
            if found is not None:
                self.items.move_to_end(key)
            return found

    def put(self, key: tuple, found: tuple) -> None:
        with self.lock:
            self.items[key] = found
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)

    def clear(self) -> None:
        with self.lock:
            self.items.clear()

    def __len__(self) -> int:
        return len(self.items)


class Searcher:
    """Runs searches on one connection. ``native``: the C extension is loaded on it, so the
    ``vectors`` table can be queried; otherwise the vector side always runs in Python."""

    def __init__(self, conn, embedder=None, native: bool = True):
        self.conn = conn
        self.embedder = embedder
        self.native = native
        self.readers: dict = {}  # numpy or python -> VectorReader, which keeps the blocks it read
        # The last queries' vectors: an MCP search_memory searches the memories, then the
        # documents, with one query, and embedding it was most of each search.
        self.recent = QueryVectors(RECENT_QUERIES)
        # Where a server shares its queries' vectors between its indexes (those of one model
        # are the same whichever index asks): None, else looked up after ``recent``.
        self.shared: QueryVectors | None = None
        self.fts = has_fts(conn)
        # Why there is no embedder, where the index's model cannot be found here (its line).
        self.unavailable: str | None = None
        # An index of schema 5 (searched read-only before its upgrade) has no Thai, Lao, Myanmar
        # or Khmer in its trigram tables: LIKE looks for those trigrams in every chunk.
        self.like_trigrams = (schema_version(conn) or SCHEMA_VERSION) < 6

    def search(
        self, query: str, opts: SearchOptions | None = None, profile: Profile | None = None
    ) -> SearchResults:
        opts = opts or SearchOptions()
        opts.check()
        opts = with_band(opts, self.embedder.model_id if self.embedder is not None else None)
        profile = profile or document_profile()
        if not isinstance(query, str):
            raise QueryError(f"query must be text, not {type(query).__name__}")
        if len(query) > MAX_QUERY_CHARS:
            raise QueryError(
                f"the query is {len(query):,} characters long, over the limit of "
                f"{MAX_QUERY_CHARS:,}; search with its key sentences"
            )
        query = clean_text(query)
        mode, notes = opts.mode, []
        if mode != "keyword" and self.embedder is None:
            why = self.unavailable or "no embedding provider is configured"
            notes.append(f"{why}: keyword-only search")
            mode = "keyword"
        query_vector, embedded = None, None
        if mode != "keyword":
            query_vector, embedded = self._embed(query)
            if not any(array("f", query_vector)):
                # The provider's zero vector: text it cannot read (see embed.READABLE).
                notes.append(
                    f"{self.embedder.model_id} cannot read this query: keyword-only search"
                )
                mode, query_vector = "keyword", None
        opts = replace(opts, mode=mode)
        plan = keyword_plan(
            query, self.fts, opts.prefix, FTS_TABLES[profile.kind], self.like_trigrams
        )
        params = {
            "pool": max(opts.candidate_pool, opts.limit),
            "fts_query": plan.match,
            "fts_terms": json.dumps(plan.any_of),
            "keyword_terms": opts.keyword_terms,
            "vector_floor": opts.vector_floor,
            "vector_ceiling": opts.vector_ceiling,
            "vector_weight": opts.vector_weight,
            "keyword_weight": opts.keyword_weight,
            "saturation": opts.saturation,
            "now": time.time() if opts.now is None else unix_time(opts.now),
            "half_life_days": opts.half_life_days,
            "min_score": opts.min_score,
            "limit": params_limit(opts, profile.kind),
            "kind": profile.kind,
            **{f"like{i}": _like_pattern(t) for i, t in enumerate(plan.like_terms)},
            **profile.params,
        }
        source, backend, vector_of = None, self._backend(opts), None
        if query_vector is not None:
            params["query_vector"] = query_vector
            params["model"] = self.embedder.model_id
            vector_of = self._vector_of(len(query_vector) // 4)
            source = "knn" if backend == "extension" else "json"
            if source == "json":
                params["vector_candidates"] = json.dumps(
                    self._python_topk(backend, params, profile)
                )
        sql = build_statement(plan, opts, source, profile, self.native, vector_of)
        used = set(re.findall(r":([a-z_0-9]+)", sql))
        params = {k: v for k, v in params.items() if k in used}
        names = result_names(profile)
        rows = []
        if self._holds(profile.kind):
            rows = [dict(zip(names, r, strict=True)) for r in self.conn.execute(sql, params)]
        if by_file(opts, profile.kind):
            rows = file_hits(rows, opts.per_file)
            rows = rows if opts.mmr else rows[: opts.limit]
        terms = highlight_terms(query)
        results = [self._result(r, terms, opts.prefix, names[len(RESULT_COLUMNS) :]) for r in rows]
        if opts.mmr and results:
            results = self._mmr(results, params, opts, vector_of)
        return SearchResults(
            results=results[: opts.limit],
            mode=mode,
            backend=backend,
            keyword_tier=next((r["keyword_tier"] for r in rows if r["keyword_tier"]), "none"),
            notes=notes,
            sql=sql,
            params=params,
            embedded=embedded if query_vector is not None else None,
        )

    def _holds(self, kind: str) -> bool:
        """Whether the index holds a chunk of ``kind``. A search of a kind it holds none of
        answers nothing without running its statement, which costs about a millisecond however
        empty the index (a server's project index, which has no memory folder, has no
        documents, and every search_memory also searches its documents)."""
        found = self.conn.execute("select exists (select 1 from chunks where kind = ?)", (kind,))
        return bool(found.fetchone()[0])

    def _embed(self, query: str) -> tuple:
        """(the query's float32 vector as bytes, the text whose embed() in this connection's
        SQL gives it, or None): the extension's embed() where the provider is the local model
        (no onnxruntime, no numpy), on this connection or, where it has no extension, on the
        process's own; else the embedder. One of the last RECENT_QUERIES is not embedded again."""
        key = (self.embedder.model_id, query)
        found = self._known(key)
        if found is None:
            found = self._embed_new(query)
            self._remember(key, found)
        return found

    def _known(self, key: tuple) -> tuple | None:
        found = self.recent.get(key)
        # Shared between native connections alone: their vectors are all the extension's
        # embed() of the query, which any of them gives back (the second item).
        if found is None and self.shared is not None and self.native:
            found = self.shared.get(key)
            if found is not None:
                self.recent.put(key, found)
        return found

    def _remember(self, key: tuple, found: tuple) -> None:
        self.recent.put(key, found)
        if self.shared is not None and self.native and found[1] is not None:
            self.shared.put(key, found)

    def embed_ahead(self, query) -> bool:
        """Embeds ``query`` now, on this thread's own connection, for a search() of it to come:
        a server calls it before it takes the lock of the index's connection, so that requests'
        embeddings run side by side and the lock is held for the search alone. The same model
        (pinned by path) gives the same vector as this connection's embed(). Only for the
        extension's local model on a native connection; whether it embedded. A failure is left
        to the search, which meets it again and says it."""
        if self.embedder is None or not self.native or not isinstance(query, str):
            return False
        if len(query) > MAX_QUERY_CHARS:
            return False
        from hybridsql.embedding.local_model import runs_locally  # loaded with the embedder

        query = clean_text(query)
        key = (self.embedder.model_id, query)
        if self._known(key) is not None:
            return False
        provider = self.embedder.provider
        conn = thread_engine_connection()
        if conn is None or not runs_locally(provider) or not provider.pin(conn):
            return False
        vector = sql_embed(conn, query)
        if vector is None:
            return False
        self._remember(key, (vector, query))
        return True

    def _embed_new(self, query: str) -> tuple:
        from hybridsql.embedding.local_model import runs_locally  # loaded with the embedder

        conn = self.conn if self.native else engine_connection()
        provider = self.embedder.provider
        # The model of the index's vectors named on the connection (pin): else its own lookup
        # might find another.
        if conn is not None and runs_locally(provider) and provider.pin(conn):
            vector = sql_embed(conn, query)
            if vector is not None:
                return vector, query if self.native else None
        return self.embedder.embed_query(query).astype("<f4").tobytes(), None

    def _backend(self, opts) -> str:
        """What finds the vector candidates: the extension in SQL, or numpy or pure Python."""
        if opts.backend == "auto":
            return "extension" if self.native else "numpy"
        if opts.backend == "extension" and not self.native:
            raise QueryError(
                "backend extension needs hybridsql's native extension, which this connection has"
                " not loaded: use backend numpy or python"
            )
        return opts.backend

    def _vector_of(self, dims: int):
        """SQL for the vector of the chunk whose id is id_sql, in the current model."""
        if self.native:
            return lambda id_sql: (
                f"(select v.vector from vectors v where v.chunk_id = {id_sql}"
                " and v.model_id = :model)"
            )
        reader = self._reader("numpy")
        return lambda id_sql: reader.vector_sql(id_sql, dims, {"model_id": "model"})

    def _reader(self, math_: str) -> "VectorReader":
        from hybridsql.db.vectors import VectorReader

        if math_ not in self.readers:
            self.readers[math_] = VectorReader(self.conn, "vectors", math_=math_)
        return self.readers[math_]

    def _python_topk(self, backend, params, profile) -> list:
        """The vector candidates found by VectorReader (numpy or pure Python), the filters'
        rows only."""
        ids = None
        if profile.filters:
            tested, key = filter_source(profile)
            ids = [
                r[0]
                for r in self.conn.execute(
                    f"select {key} from {tested} where {profile.filters}", profile.params
                )
            ]
        where = {"model_id": params["model"], "kind": profile.kind}
        return self._reader(backend).topk(params["query_vector"], params["pool"], where, ids)

    @staticmethod
    def _result(row: dict, terms, prefix, extra_names) -> SearchResult:
        """A row of the statement, by column name (statement.result_names), as a SearchResult."""
        kind, path, start, text = row["kind"], row["path"], row["start_line"], row["text"]
        heading, ranges = row["heading"], row["file_ranges"]
        semantic, keyword = row["semantic_hit"], row["keyword_hit"]
        match = "both" if semantic and keyword else ("semantic" if semantic else "keyword")
        if keyword and (kind != "document" or is_markdown(path)):  # plain text has no headings
            heading = matched_heading(text, heading, start, terms, prefix)
        end = row["end_line"]
        return SearchResult(
            id=row["id"],
            kind=kind,
            path=path,
            start_line=start,
            end_line=end,
            heading=heading,
            text=text,
            snippet=make_snippet(text, terms, prefix=prefix),
            score=row["score"],
            relevance=row["relevance"],
            vector_score=row["cosine"],
            keyword_score=row["keyword_score"] if keyword else None,
            decay=row["decay"],
            match_type=match,
            other_ranges=[r for r in json.loads(ranges) if r != [start, end]] if ranges else [],
            extra={name: row[name] for name in extra_names},
        )

    def _mmr(self, results, params, opts, vector_of):
        """Maximal marginal relevance: trade a little score for results unlike those above."""
        if "query_vector" not in params:
            return results
        ids = [r.id for r in results]
        marks = ", ".join(f":id{i}" for i in range(len(ids)))
        blobs = dict(
            self.conn.execute(
                f"select c.id, {vector_of('c.id')} from chunks c where c.id in ({marks})",
                {"model": params["model"], **{f"id{i}": v for i, v in enumerate(ids)}},
            ).fetchall()
        )
        import numpy as np

        vecs = {}
        for i in ids:
            if blobs.get(i) is not None:
                v = np.frombuffer(blobs[i], dtype="<f4").astype(np.float64)
                n = np.linalg.norm(v)
                vecs[i] = v / n if n else v
        chosen: list = []
        rest = list(results)
        while rest and len(chosen) < opts.limit:

            def gain(r):
                sim = max(
                    (
                        float(vecs[r.id] @ vecs[c.id])
                        for c in chosen
                        if r.id in vecs and c.id in vecs
                    ),
                    default=0.0,
                )
                return opts.mmr_lambda * r.score - (1 - opts.mmr_lambda) * sim

            best = max(rest, key=gain)
            chosen.append(best)
            rest.remove(best)
        return chosen
